"""Model zoo: each module registers factories ``(params, input_shape, num_classes) -> nn.Module``."""
