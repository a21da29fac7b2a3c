"""FedCos presets scale their inputs as FedCos's code does (issue 24 point 5; main_fed.py lines 91, 108, 112)."""

from __future__ import annotations

import pytest
import torch

from fedrun.core.errors import ConfigError
from fedrun.data.base import Dataset, Preprocess, Split

# torchvision Normalize constants in FedCos's main_fed.py, written out here independently of fedrun
CODE = {"cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)), "fmnist": ((0.5,), (0.5,))}
PRESETS = {
    "fedcos_table1_cifar10_cnn": "cifar10",
    "fedcos_table2_fmnist_mlp": "fmnist",
    "fedcos_table4_cifar10_cnn": "cifar10",
    "fedcos_table4_fmnist_mlp": "fmnist",
}


def tiny(name: str, channels: int) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, channels, 3, 3), generator=g, dtype=torch.uint8)
    split = Split(x=x, y=torch.zeros(4, dtype=torch.long))
    return Dataset(name, split, split, 10, (channels, 3, 3), mean=(0.3,) * channels, std=(0.3,) * channels)


@pytest.mark.parametrize(("preset", "name"), PRESETS.items())
def test_fedcos_presets_normalise_with_the_codes_constants(make_spec, preset: str, name: str) -> None:
    assert make_spec(f"experiment={preset}").data.params.normalize == "fedcos"
    mean, std = CODE[name]
    data = tiny(name, len(mean)).normalised("fedcos")
    got = Preprocess(data.mean, data.std, torch.float64)(data.train.x)
    x = data.train.x.to(torch.float64) / 255.0
    want = torch.stack([(x[:, c] - mean[c]) / std[c] for c in range(len(mean))], 1)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_fedcos_normalisation_is_refused_for_a_dataset_its_code_does_not_load() -> None:
    with pytest.raises(ConfigError, match="data.normalize") as e:
        tiny("cifar100", 3).normalised("fedcos")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "preset",
    [*PRESETS, "fedcos_table3_cifar100_resnet18", "fedcos_table5_shakespeare_lstm"],
)
def test_fedcos_presets_score_the_whole_test_split(make_spec, preset: str) -> None:
    """FedCos's test_img (models/test.py:20-33) divides by len(dataset_test): no proxy set is carved out of it
    (fedrun's default proxy.per_class=10 left FMNIST 9,900 test images)."""
    assert make_spec(f"experiment={preset}").proxy.per_class == 0
