"""Deterministic randomness keyed by (seed, purpose, round, client), as in FedJAX.

Every random choice in a run draws from a generator derived from the run seed and *what it is for*, so
the initial model, the client sampling sequence and each client's batch order are the same for every
algorithm at a given seed, and do not depend on how many random numbers other parts consumed.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch


def _words(seed: int, parts: tuple[int | str, ...]) -> list[int]:
    out = [int(seed) & 0xFFFFFFFF]
    for p in parts:
        out.append(zlib.crc32(p.encode()) if isinstance(p, str) else int(p) & 0xFFFFFFFF)
    return out


def derive(seed: int, *parts: int | str) -> int:
    """A 63-bit integer seed for (seed, *parts)."""
    state = np.random.SeedSequence(_words(seed, parts)).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def np_rng(seed: int, *parts: int | str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(_words(seed, parts)))


def torch_gen(seed: int, *parts: int | str, device: str | torch.device = "cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(derive(seed, *parts))
    return g
