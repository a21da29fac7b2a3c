"""Client-side validation hold-out (``data.client_valid_ratio``).

FedLAW's code (ZexiLee/ICML-2023-FedLAW, ``args.py``: ``--client_valid_ratio`` default 0.3; ``nodes.py``
``Node.train_val_split``) shuffles every client's indices and sets the first ``int(ratio * n)`` aside as
that client's validation set, for every method (``main_fedlaw.py`` and ``main_baselines.py`` share
``Node``). The clients train on the other samples; the held-out ones only feed a printed personalisation
accuracy, so fedrun drops them.
"""

from __future__ import annotations

import numpy as np

from fedrun.core.rng import np_rng


def hold_out(parts: list[np.ndarray], ratio: float, seed: int) -> list[np.ndarray]:
    """The training part of every client: its indices minus a seeded ``int(ratio * n)`` of them (sorted).

    ``ratio`` = 0 returns ``parts`` unchanged. The draw is keyed by (seed, "holdout", client), so a client's
    hold-out does not depend on the other clients.
    """
    if not ratio:
        return parts
    out = []
    for i, p in enumerate(parts):
        p = np.asarray(p)
        shuffled = np_rng(seed, "holdout", i).permutation(p)
        out.append(np.sort(shuffled[int(ratio * len(p)) :]))
    return out
