"""PFLlib's 4-layer CNN (``model=pfllib_cnn``): FedAvgCNN of TsingZ0/PFLlib ``system/flcore/trainmodel/models.py``
as its ``main.py`` builds it for the MNIST family (in_features=1, dim=1024)."""

from __future__ import annotations

import pytest
import torch

from fedrun.core.errors import ConfigError
from fedrun.models.base import FunctionalModel, ModelParams
from fedrun.models.pfllib import pfllib_cnn


def test_parameters_equal_pfllibs_fedavgcnn_on_fashion_mnist() -> None:
    net = pfllib_cnn(ModelParams(), (1, 28, 28), 10)
    # FedAvgCNN(1, 10, 1024), counted from PFLlib's class: 832 + 51,264 + 524,800 + 5,130
    assert sum(p.numel() for p in net.parameters()) == 582_026
    shapes = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    assert shapes == {  # PFLlib's state_dict names, so its checkpoints' keys are these
        "conv1.0.weight": (32, 1, 5, 5),
        "conv1.0.bias": (32,),
        "conv2.0.weight": (64, 32, 5, 5),
        "conv2.0.bias": (64,),
        "fc1.0.weight": (512, 1024),
        "fc1.0.bias": (512,),
        "fc.weight": (10, 512),
        "fc.bias": (10,),
    }
    assert net(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


def test_the_head_is_fc_as_pfllib_splits_it() -> None:
    model = FunctionalModel(pfllib_cnn(ModelParams(), (1, 28, 28), 10))
    assert model.head_layers() == ["fc"] and model.head_keys() == ["fc.weight", "fc.bias"]


def test_cifar_sized_inputs_give_pfllibs_1600_and_tiny_ones_are_refused() -> None:
    assert pfllib_cnn(ModelParams(), (3, 32, 32), 10).fc1[0].in_features == 1600  # main.py: Cifar10, dim=1600
    with pytest.raises(ConfigError, match="at least 16 x 16"):
        pfllib_cnn(ModelParams(), (1, 12, 12), 10)
    with pytest.raises(ConfigError, match="needs image input"):
        pfllib_cnn(ModelParams(), (60,), 10)
