"""On-device augmentation of client training batches (``data.augment``).

``crop_flip``: torchvision's ``RandomCrop(size, padding=4)`` then ``RandomHorizontalFlip()`` (FedCos
``main_fed.py`` CIFAR ``transform_train``): each stored image is zero-padded by 4 pixels before
normalisation (black borders), a window of the original size is cut at a uniform offset, and it is mirrored
with probability 1/2.
``flip_crop_half``: FL-Simulator's ``dataset.py`` ``Dataset.__getitem__`` (FedSAM, MoFedSAM, FedSMOO): the
normalised image is mirrored with probability 1/2, then *with probability 1/2* cropped from its 4-pixel
zero-padded copy (zero after normalisation: borders of the mean colour).

The random draws are a counter-based hash of (seed, round, client, step, position in the batch), computed
on the device for a whole ``[clients, batch]`` gather at once: a sample gets the same crop and flip
whichever engine trains it and however the cohort is chunked, and the draws cost no generator per client.
"""

from __future__ import annotations

import torch

from fedrun.core.rng import derive

PAD = 4
_M = 0xFFFFFFFF
_MUL = 0x45D9F3B  # < 2^27: x * _MUL stays below 2^59 for 32-bit x, so int64 arithmetic never overflows
_GOLD = 0x9E3779B9


def mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (two multiply-xorshift rounds) on int64 tensors holding values < 2^32."""
    x = x & _M
    x = (((x >> 16) ^ x) * _MUL) & _M
    x = (((x >> 16) ^ x) * _MUL) & _M
    return (x >> 16) ^ x


def base_key(seed: int) -> int:
    """The run's augmentation key (32 bits) from its seed."""
    return derive(seed, "augment") & _M


def draws(key: int, rnd: int, clients: torch.Tensor, step: int, width: int, what: int) -> torch.Tensor:
    """32-bit draws for (round, client, step, position, ``what``): shape ``clients.shape + (width,)``."""
    dev = clients.device
    k = mix(torch.full(clients.shape, (key ^ rnd) & _M, dtype=torch.long, device=dev))
    k = mix(k ^ (clients.long() & _M))
    k = mix(k ^ ((step * _GOLD) & _M))
    pos = torch.arange(width, dtype=torch.long, device=dev)
    return mix(mix(k.unsqueeze(-1) ^ pos) ^ (((what + 1) * _GOLD) & _M))


def crop_flip(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Images ``x`` [N, C, H, W] zero-padded by ``PAD``, cropped at offsets (``dy``, ``dx``) in [0, 2 PAD] of
    the padded image and mirrored left-right where ``flip``; one gather for the whole batch."""
    n, c, h, w = x.shape
    dev = x.device
    rows = torch.arange(h, device=dev).unsqueeze(0) + dy.unsqueeze(1) - PAD  # [N, H] source rows
    cols = torch.arange(w, device=dev).unsqueeze(0) + dx.unsqueeze(1) - PAD  # [N, W]
    cols = torch.where(flip.unsqueeze(1), cols.flip(1), cols)
    inside = ((rows >= 0) & (rows < h)).unsqueeze(1).unsqueeze(3) & ((cols >= 0) & (cols < w)).unsqueeze(1).unsqueeze(2)
    out = x[
        torch.arange(n, device=dev).view(n, 1, 1, 1),
        torch.arange(c, device=dev).view(1, c, 1, 1),
        rows.clamp(0, h - 1).view(n, 1, h, 1),
        cols.clamp(0, w - 1).view(n, 1, 1, w),
    ]
    return torch.where(inside, out, torch.zeros((), dtype=x.dtype, device=dev))


def augment_batch(
    x: torch.Tensor, key: int, rnd: int, clients: torch.Tensor, step: int, half_crop: bool = False
) -> torch.Tensor:
    """Random crop + flip of a gathered batch ``x`` [*clients.shape, B, C, H, W] with the draws of (round,
    each row's client, step, position); ``half_crop``: only half of the images (drawn) are cropped."""
    lead, b = x.shape[: clients.dim()], x.shape[clients.dim()]
    span = 2 * PAD + 1
    dy = draws(key, rnd, clients, step, b, 0) % span
    dx = draws(key, rnd, clients, step, b, 1) % span
    flip = (draws(key, rnd, clients, step, b, 2) & 1).bool()
    if half_crop:
        crop = (draws(key, rnd, clients, step, b, 3) & 1).bool()
        dy, dx = torch.where(crop, dy, PAD), torch.where(crop, dx, PAD)  # offset PAD: the image itself
    flat = x.reshape(-1, *x.shape[clients.dim() + 1 :])
    out = crop_flip(flat, dy.reshape(-1), dx.reshape(-1), flip.reshape(-1))
    return out.reshape(*lead, b, *out.shape[1:])
