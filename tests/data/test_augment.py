"""On-device random crop (padding 4) + horizontal flip of client batches, keyed by (seed, round, client, step)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.core.errors import ConfigError
from fedrun.data.augment import PAD, base_key, crop_flip, draws
from fedrun.papers.cost import preset_cfg
from fedrun.run.experiment import build_experiment
from tests.conftest import REPO

SMALL = ("data.max_train_samples=400", "data.max_test_samples=100", "fl.clients=4", "hardware.threads=1")


def reference(x: torch.Tensor, dy: int, dx: int, flip: bool) -> torch.Tensor:
    """torchvision's RandomCrop(padding=4) then RandomHorizontalFlip on one image, by hand."""
    h, w = x.shape[-2:]
    padded = F.pad(x, (PAD, PAD, PAD, PAD))  # zeros around the raw image
    out = padded[:, dy : dy + h, dx : dx + w]
    return out.flip(-1) if flip else out


def test_crop_flip_matches_pad_slice_flip() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 256, (12, 3, 7, 9), generator=g, dtype=torch.uint8)
    dy = torch.tensor([0, 8, 4, 2, 0, 8, 3, 5, 1, 7, 6, 4])
    dx = torch.tensor([8, 0, 4, 6, 0, 8, 5, 3, 7, 1, 2, 4])
    flip = torch.tensor([0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 0]).bool()
    out = crop_flip(x, dy, dx, flip)
    for i in range(len(x)):
        assert torch.equal(out[i], reference(x[i], int(dy[i]), int(dx[i]), bool(flip[i]))), i
    assert torch.equal(crop_flip(x, torch.full((12,), PAD), torch.full((12,), PAD), torch.zeros(12).bool()), x)


def test_draws_are_keyed_and_spread() -> None:
    key, clients = base_key(3), torch.tensor([0, 5, 9])
    a = draws(key, 2, clients, 7, 64, 0)
    assert a.shape == (3, 64) and torch.equal(a, draws(key, 2, clients, 7, 64, 0))
    # a client's draws do not depend on the other rows, nor the batch width on the first positions
    assert torch.equal(a[1], draws(key, 2, torch.tensor(5), 7, 64, 0))
    assert torch.equal(a[:, :10], draws(key, 2, clients, 7, 10, 0))
    for other in (draws(base_key(4), 2, clients, 7, 64, 0), draws(key, 3, clients, 7, 64, 0),
                  draws(key, 2, clients, 8, 64, 0), draws(key, 2, clients, 7, 64, 1)):  # fmt: skip
        assert (other != a).float().mean() > 0.9
    big = draws(key, 0, torch.arange(50), 0, 200, 0)
    offsets = torch.bincount((big % (2 * PAD + 1)).flatten(), minlength=2 * PAD + 1).float() / big.numel()
    assert offsets.min() > 0.1 and offsets.max() < 0.125  # each of the 9 offsets near 1/9
    assert (big & 1).float().mean().item() == pytest.approx(0.5, abs=0.02)


def test_train_batches_are_augmented_and_reproducible(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL, "data.augment=crop_flip"))
    again = build_experiment(make_spec(*SMALL, "data.augment=crop_flip"))
    fed = exp.fed
    idx = fed.clients[1][:16]
    b = fed.train_batch(idx, 3, 1, 5)
    assert torch.equal(b["x"], again.fed.train_batch(idx, 3, 1, 5)["x"])  # same seed => same batches
    assert torch.equal(b["y"], fed.batch(idx)["y"])
    assert not torch.equal(b["x"], fed.batch(idx)["x"])  # augmented
    assert not torch.equal(b["x"], fed.train_batch(idx, 3, 1, 6)["x"])  # another step, other crops
    # row r of a [clients, batch] gather equals that client's own gather (what the sequential engine does)
    rows = torch.stack([fed.clients[0][:16], idx, fed.clients[2][:16]])
    many = fed.train_batch(rows, 3, torch.tensor([0, 1, 2]), 5)
    assert torch.equal(many["x"][1], b["x"])
    # and each image is the reference crop/flip of the stored image, then normalised
    key, pos = fed.augment_key, 7
    dy, dx, fl = (int(draws(key, 3, torch.tensor(1), 5, 16, w)[pos]) for w in range(3))
    raw = fed.train.x[idx[pos]]
    want = fed.pre(reference(raw, dy % 9, dx % 9, bool(fl & 1)).unsqueeze(0))[0]
    torch.testing.assert_close(b["x"][pos], want)
    # evaluation and proxy gathers are never augmented
    off = build_experiment(make_spec(*SMALL))
    assert torch.equal(fed.batch(idx)["x"], off.fed.batch(idx)["x"])
    assert torch.equal(off.fed.train_batch(idx, 3, 1, 5)["x"], off.fed.batch(idx)["x"])


def test_augment_needs_images(make_spec: Callable[..., RunSpec]) -> None:
    with pytest.raises(ConfigError, match="augment"):
        make_spec("data.augment=mixup")
    with pytest.raises(ConfigError, match="data.augment"):
        build_experiment(make_spec("data=synthetic", "partition=natural", "data.augment=crop_flip", "fl.clients=5"))


def test_flip_crop_half_crops_half_the_normalised_images(make_spec: Callable[..., RunSpec]) -> None:
    """FL-Simulator dataset.py: flip w.p. 1/2, then w.p. 1/2 a crop of the zero-padded *normalised* image.

    (It flips before cropping at (d1, d2); that is the crop at (d1, 2 PAD - d2) flipped, the same law.)
    """
    exp = build_experiment(make_spec(*SMALL, "data.augment=flip_crop_half"))
    fed, key = exp.fed, exp.fed.augment_key
    idx = torch.arange(64)
    out = fed.train_batch(idx, 1, 2, 0)["x"]
    norm = fed.batch(idx)["x"]
    cl = torch.tensor(2)
    dy, dx, fl, crop = (draws(key, 1, cl, 0, 64, w) for w in range(4))
    for p in range(64):
        d = (int(dy[p]) % 9, int(dx[p]) % 9) if crop[p] & 1 else (PAD, PAD)
        assert torch.equal(out[p], reference(norm[p], *d, bool(fl[p] & 1))), p
    assert 20 < int((crop & 1).sum()) < 44  # about half cropped
    # the padding is zero in normalised units (the mean colour), not black
    black = float(fed.pre(torch.zeros(1, 1, 1, 1, dtype=torch.uint8)))
    assert black < -0.5 and (out == 0).any() and not (out == black).all()


AUGMENTED = {  # the presets whose authors' code augments client batches, and how
    "fedcos_table1_cifar10_cnn": "crop_flip",  # FedCos main_fed.py:104-106
    "fedcos_table4_cifar10_cnn": "crop_flip",
    "fedcos_table3_cifar100_resnet18": "crop_flip",  # same script (README:42), its cifar branch
    "fedsam_table1_cifar10": "flip_crop_half",  # FL-Simulator dataset.py:415-421
    "fedsam_table1_cifar100": "flip_crop_half",
    "fedsam_table2_cifar10": "flip_crop_half",
    "fedsam_appf_cifar100": "flip_crop_half",
}


def test_augmentation_is_on_in_exactly_the_presets_whose_authors_used_it() -> None:
    for path in sorted((REPO / "conf" / "experiment").glob("*.yaml")):
        # each preset composed once per process (preset_cfg's cache, shared with the papers' tests), then validated
        spec = validate(OmegaConf.create(preset_cfg(path.stem)))
        assert spec.data.params.augment == AUGMENTED.get(path.stem, "none"), path.stem
