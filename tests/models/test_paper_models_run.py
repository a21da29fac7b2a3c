"""The new models train end to end through the runner on tiny real-format files: a BatchNorm ResNet (with
running statistics, as FedLAW) and the LSTM on Shakespeare's natural clients."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np

from fedrun.run.loop import run


def tiny_cifar10(root: Path) -> None:
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        blob = {b"data": rng.integers(0, 256, (8, 3072), dtype=np.uint8), b"labels": list(range(8))}
        (d / name).write_bytes(pickle.dumps(blob, protocol=4))


def tiny_shakespeare(root: Path) -> None:
    text = "All the world's a stage, and all the men and women merely players; they have their exits " * 3
    for split, users in (("train", {"AS_YOU_LIKE_IT_JAQUES": 12, "AS_YOU_LIKE_IT_ROSALIND": 6}), ("test", {"X": 4})):
        d = root / "shakespeare" / "data" / split
        d.mkdir(parents=True)
        data = {
            u: {"x": [text[i : i + 10] for i in range(n)], "y": [text[i + 10] for i in range(n)]}
            for u, n in users.items()
        }
        (d / "part.json").write_text(
            json.dumps({"users": list(users), "num_samples": list(users.values()), "user_data": data})
        )


def test_batchnorm_resnet_trains_end_to_end(make_spec, tmp_path: Path) -> None:  # noqa: ANN001
    tiny_cifar10(tmp_path / "data")
    spec = make_spec(
        "data=cifar10",
        f"data.root={tmp_path / 'data'}",
        "data.verify=false",
        "model=resnet8",
        "partition=iid",
        "fl.clients=2",
        "fl.rounds=1",
        "fl.batch_size=8",
        "eval.last_k=1",
        "proxy.per_class=0",  # a proxy set would take all 8 test images (refused: nothing to evaluate on)
    )
    (tmp_path / "run").mkdir()
    summary = run(spec, tmp_path / "run")
    assert summary["status"] == "completed" and summary["engine"] == "sequential"
    assert math.isfinite(summary["test_loss_final"])


def test_batchnorm_running_stats_are_averaged_like_the_parameters(make_spec, tmp_path: Path) -> None:  # noqa: ANN001
    import torch

    from fedrun.algorithms.base import average_buffers
    from fedrun.run.experiment import build_experiment

    tiny_cifar10(tmp_path / "data")
    spec = make_spec(
        "data=cifar10",
        f"data.root={tmp_path / 'data'}",
        "data.verify=false",
        "model=resnet8",
        "partition=iid",
        "fl.clients=2",
        "fl.batch_size=8",
        "proxy.per_class=0",
    )
    exp = build_experiment(spec)
    params = exp.model.init_params()
    before = {k: v.clone() for k, v in exp.model.buffers.items()}
    res = exp.engine.train_cohort(0, params, {}, torch.tensor([0, 1]), {}, 0.01)
    ups = res.uploads["buffers"]
    key = "stem.1.running_mean"
    assert not torch.equal(ups[key][0], before[key])  # each client updated its own copy...
    assert not torch.equal(ups[key][0], ups[key][1])  # ...on its own data
    assert torch.equal(exp.model.buffers[key], before[key])  # and the global statistics did not move
    w = torch.tensor([0.25, 0.75], dtype=torch.float64)
    avg = average_buffers(ups, w)
    torch.testing.assert_close(avg[key], 0.25 * ups[key][0] + 0.75 * ups[key][1])
    assert avg["stem.1.num_batches_tracked"] == ups["stem.1.num_batches_tracked"].max()


def test_lstm_runs_on_shakespeare_roles(make_spec, tmp_path: Path) -> None:  # noqa: ANN001
    tiny_shakespeare(tmp_path / "data")
    spec = make_spec(
        "data=shakespeare",
        "data.seq_len=10",
        f"data.root={tmp_path / 'data'}",
        "model=lstm",
        "partition=natural",
        "fl.clients=2",
        "fl.rounds=1",
        "fl.batch_size=4",
        "eval.last_k=1",
        "proxy.per_class=0",  # a proxy set would take all 4 test samples (refused: nothing to evaluate on)
    )
    (tmp_path / "run").mkdir()
    summary = run(spec, tmp_path / "run")
    assert summary["status"] == "completed"
    assert summary["partition_stats"]["size_min"] == 6 and summary["partition_stats"]["size_max"] == 12
    assert math.isfinite(summary["test_loss_final"])
