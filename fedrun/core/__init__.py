"""Ground layer: parameter trees, keyed randomness, autodiff helpers, the one-line errors, YAML that cannot explode."""
