"""Differential privacy (docs/privacy.md): the privacy budget from a maintained accountant (``accounting``),
client-level DP-FedAvg's clipping, keyed noise and adaptive clip (``client``), and sample-level DP-SGD's
per-sample step (``sample``)."""
