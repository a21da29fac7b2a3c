"""compression=half: float16 entries, 16 bits each, and the run it gives."""

from __future__ import annotations

from pathlib import Path

import torch

from fedrun.config.validate import validate
from fedrun.run.loop import run
from fedrun.upload.base import COMPRESSORS, UploadContext
from fedrun.upload.settings import CompressionSettings
from tests.conftest import compose_cfg


def test_half_rounds_each_entry_to_float16_and_sends_16_bits_each() -> None:
    x = torch.tensor([[1.0, 1 + 2**-12, -3.14159, 1e-8]])
    ctx = UploadContext(0, torch.tensor([0]), 0, torch.ones(1, dtype=torch.float64), torch.device("cpu"))
    half = COMPRESSORS.get("half").obj(CompressionSettings(name="half"))
    sent = half.compress(x, ctx)
    assert sent.tolist() == [[1.0, 1.0, float(torch.tensor(-3.14159).half()), float(torch.tensor(1e-8).half())]]
    assert half.bits_per_client(1000) == 16_000


def test_a_run_uploads_half_the_bytes_of_the_uncompressed_one(tmp_path: Path) -> None:
    small = ["experiment=smoke", "fl.rounds=2", "fl.clients=4", "model.hidden=[16]", "hardware.threads=1"]
    (tmp_path / "plain").mkdir(), (tmp_path / "half").mkdir()
    plain = run(validate(compose_cfg(small)), tmp_path / "plain")
    half = run(validate(compose_cfg([*small, "compression=half"])), tmp_path / "half")
    assert plain["status"] == half["status"] == "completed"
    rows = [(tmp_path / d / "metrics.csv").read_text().splitlines() for d in ("plain", "half")]
    header = rows[0][0].split(",")
    up = header.index("bytes_up")
    assert [int(r.split(",")[up]) for r in rows[1][1:]] == [int(r.split(",")[up]) // 2 for r in rows[0][1:]]
