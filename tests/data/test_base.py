"""``data.image_size``: the MNIST family zero-padded to 32 x 32 so the CIFAR-sized models run on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedrun.config.identity import fingerprint
from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.data.base import Dataset, Split, pad_images
from fedrun.run.experiment import build_experiment, load_data

SUBSET = ("data.max_train_samples=50", "data.max_test_samples=20", "fl.clients=2", "proxy.per_class=0")


def tiny(shape: tuple[int, int, int], dtype: torch.dtype = torch.uint8) -> Dataset:
    x = torch.randint(1, 256, (3, *shape)).to(dtype)
    split = Split(x, torch.tensor([0, 1, 2]))
    return Dataset("tiny", split, split, 3, shape)


def test_pad_images_puts_a_zero_border_around_the_stored_pixels() -> None:
    d = tiny((1, 28, 28))
    out = pad_images(d, 32)
    assert out.input_shape == (1, 32, 32) and out.train.x.shape == (3, 1, 32, 32) and out.train.x.dtype == torch.uint8
    ref = torch.zeros(3, 1, 32, 32, dtype=torch.uint8)
    ref[:, :, 2:30, 2:30] = d.train.x  # torchvision's Pad(2): 2 pixels of 0 on every side
    assert torch.equal(out.train.x, ref) and torch.equal(out.test.x, ref)
    assert torch.equal(out.train.y, d.train.y)
    odd = pad_images(tiny((3, 27, 28)), 32)  # odd margin: the extra row at the bottom
    assert torch.equal(odd.train.x[:, :, :2].sum(), torch.tensor(0)) and odd.train.x[:, :, 2:29, 2:30].all()
    assert not odd.train.x[:, :, 29:].any()
    assert pad_images(d, None) is d and pad_images(d, 28) is d


@pytest.mark.parametrize(
    ("data", "match"),
    [(tiny((1, 28, 28)), "smaller than tiny's 28x28"), (tiny((1, 28, 28), torch.float32), "not image data")],
)
def test_pad_images_refuses_what_it_cannot_pad(data: Dataset, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        pad_images(data, 16 if "smaller" in match else 32)
    assert err.value.field == "data.image_size"


def test_fmnist_padded_to_32_runs_resnet8(make_spec: Callable[..., RunSpec]) -> None:
    plain = make_spec(*SUBSET)
    spec = make_spec(*SUBSET, "data.image_size=32", "model=resnet8")
    a, b = load_data(plain), load_data(spec)
    assert a.input_shape == (1, 28, 28) and b.input_shape == (1, 32, 32)
    assert torch.equal(b.train.x[:, :, 2:30, 2:30], a.train.x) and not b.train.x[:, :, :2].any()
    exp = build_experiment(spec)
    batch = exp.fed.batch(torch.arange(4))
    assert exp.model.logits(exp.model.init_params(), batch["x"]).shape == (4, 10)
    with pytest.raises(ConfigError, match="resnet8 needs image input"):
        build_experiment(make_spec(*SUBSET, "model=resnet8"))


def test_image_size_off_keeps_old_checkpoints_resumable(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    raw = make_spec().raw
    old = {**raw, "data": {k: v for k, v in raw["data"].items() if k != "image_size"}}  # before the key existed
    assert "image_size" in raw["data"] and fingerprint(raw) == fingerprint(old)
    assert fingerprint(make_spec("data.image_size=32").raw) != fingerprint(raw)
