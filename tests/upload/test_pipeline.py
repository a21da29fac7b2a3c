"""The upload pipeline in runs: the default leaves a run bit-identical, a no-op compressor too, error feedback's
residual is persistent client state (clients not in the cohort keep theirs, a killed run resumes it exactly),
the engines agree, every method's extra uploads are compressed, bad settings are refused in one line."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedrun.cli import main as cli
from fedrun.config.identity import config_key
from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.core.errors import ConfigError
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fedrun.run.experiment import build_experiment
from fedrun.run.loop import run
from fedrun.run.state import fresh_state
from fedrun.storage.atomic import TIMING_COLUMNS
from fedrun.upload.base import COMPRESSORS, RowStage, UploadContext, UploadStage
from fedrun.upload.pipeline import UPLOAD_STATE, UploadPipeline
from tests.conftest import compose_cfg, main_exit_code
from tests.run.run_util import interrupted_copy
from tests.upload.upload_util import pipeline_of as build_pipeline

SMALL = [
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.participation=0.5",
    "fl.rounds=4",
    "model.hidden=[32]",
    "hardware.threads=1",
    "output.plots=false",
    "output.quiet=true",
    "checkpoint.every=1",
]
EF = ["compression=topk", "compression.ratio=0.05", "compression.error_feedback=true"]


def _topk_bytes(d: int, ratio: float = 0.05) -> int:
    """One client's bytes for top-k of a d-entry part: k = ceil(ratio d) values and indices of ceil(log2 d) bits."""
    k = math.ceil(ratio * d)
    return math.ceil(k * (32 + math.ceil(math.log2(d))) / 8)


def _metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "metrics.csv").drop(columns=list(TIMING_COLUMNS))


def _run(make_spec: Callable[..., RunSpec], where: Path, *overrides: str) -> pd.DataFrame:
    where.mkdir()
    run(make_spec(*SMALL, *overrides), where)
    return _metrics(where)


def test_the_default_builds_no_pipeline_and_keeps_the_run_identity(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*SMALL)
    assert build_pipeline(spec) is None
    assert build_experiment(spec).upload is None
    raw = dict(spec.raw)
    assert "compression" in raw  # composed, at its defaults: no part of the run's identity
    assert config_key(raw) == config_key({k: v for k, v in raw.items() if k != "compression"})
    assert config_key(make_spec(*SMALL, *EF).raw) != config_key(raw)


def test_topk_of_every_entry_without_error_feedback_is_the_uncompressed_run(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    dense = _run(make_spec, tmp_path / "dense")
    same = _run(make_spec, tmp_path / "topk", "compression=topk", "compression.ratio=1.0")
    assert (same["bytes_up"] > dense["bytes_up"]).all()  # values and indices: more than dense, as counted
    cols = [c for c in dense.columns if c != "bytes_up"]
    pd.testing.assert_frame_equal(same[cols], dense[cols], check_exact=True)


def test_bytes_up_are_the_compressed_size(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    df = _run(make_spec, tmp_path / "run", "compression=sign")
    d = 784 * 32 + 32 + 32 * 10 + 10  # the 784-32-10 MLP's update
    assert (df["bytes_up"] == df["clients"] * math.ceil((d + 32) / 8)).all()
    assert {"sign_rel_error", "sign_residual_norm"} <= set(df.columns)


def test_qsgd_bytes_up_count_one_norm_per_bucket(make_spec: Callable[..., RunSpec], tmp_path: Path) -> None:
    d = 784 * 32 + 32 + 32 * 10 + 10  # the 784-32-10 MLP's update: 50 buckets of 512 (the last of 362)
    df = _run(make_spec, tmp_path / "run", "compression=qsgd")  # s = 16: a sign and 5 bits of level an entry
    assert (df["bytes_up"] == df["clients"] * math.ceil((50 * 32 + d * 6) / 8)).all()
    whole = _run(make_spec, tmp_path / "whole", "compression=qsgd", "compression.bucket=null")
    assert (whole["bytes_up"] == whole["clients"] * math.ceil((32 + d * 6) / 8)).all()


def test_the_bucket_is_part_of_a_qsgd_run_identity_and_not_of_an_uncompressed_one(
    make_spec: Callable[..., RunSpec],
) -> None:
    qsgd = config_key(make_spec(*SMALL, "compression=qsgd").raw)
    assert config_key(make_spec(*SMALL, "compression=qsgd", "compression.bucket=null").raw) != qsgd
    assert config_key(make_spec(*SMALL, "compression=qsgd", "compression.bucket=512").raw) == qsgd
    plain = make_spec(*SMALL).raw
    assert config_key(plain) == config_key({k: v for k, v in plain.items() if k != "compression"})


def test_residual_is_client_state_kept_by_clients_not_sampled(make_spec: Callable[..., RunSpec]) -> None:
    from fedrun.run.rounds import train_round

    exp = build_experiment(make_spec(*SMALL, *EF))
    state = fresh_state(exp)
    assert set(state.clients.rows) == {UPLOAD_STATE}
    assert set(state.clients.rows[UPLOAD_STATE]["topk"]) == {"params"}
    before = state.clients.rows[UPLOAD_STATE]["topk"]["params"].clone()
    train_round(exp, state, 0)
    after = state.clients.rows[UPLOAD_STATE]["topk"]["params"]
    changed = (after != before).any(1)
    assert changed.sum() == 2  # the cohort of 2 (participation 0.5) got residuals, the others kept their zeros
    assert (after[~changed] == 0).all()


def test_a_killed_run_resumes_the_residuals_exactly(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(*SMALL, *EF, "hardware.engine=vectorised")
    full, partial = interrupted_copy(spec, tmp_path, monkeypatch, 2)
    mid = load_checkpoint(partial / CHECKPOINT_FILE).client_states[UPLOAD_STATE]["topk"]["params"]
    assert mid.abs().sum() > 0  # it resumes real residuals
    cli.resume(partial, [])
    pd.testing.assert_frame_equal(_metrics(partial), _metrics(full), check_exact=True)
    a, b = (load_checkpoint(p / CHECKPOINT_FILE) for p in (partial, full))
    assert torch.equal(a.client_states[UPLOAD_STATE]["topk"]["params"], b.client_states[UPLOAD_STATE]["topk"]["params"])
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


def test_engines_agree_under_compression(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    over = [*EF[:-1], "compression.ratio=0.2", "compression.error_feedback=true"]
    seq = _run(make_spec, tmp_path / "seq", *over, "hardware.engine=sequential")
    vec = _run(make_spec, tmp_path / "vec", *over, "hardware.engine=vectorised")
    assert (seq["bytes_up"] == vec["bytes_up"]).all()
    pd.testing.assert_frame_equal(seq, vec, check_exact=False, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(
    ("algorithm", "extra", "broadcast_ref"),
    [("scaffold", "delta_c", False), ("mimelite", "grad", False), ("fedsmoo", "mu", False)],
)
def test_extra_uploads_are_compressed_with_their_own_residual(
    tmp_path: Path, make_spec: Callable[..., RunSpec], algorithm: str, extra: str, broadcast_ref: bool
) -> None:
    exp = build_experiment(make_spec(*SMALL, *EF, f"algorithm={algorithm}"))
    assert exp.upload is not None
    parts = {p.key: p for p in exp.upload.parts}
    assert set(parts) == {"params", extra}
    assert parts[extra].broadcast_ref is broadcast_ref
    state = fresh_state(exp)
    assert set(state.clients.rows[UPLOAD_STATE]["topk"]) == {"params", extra}
    df = _run(make_spec, tmp_path / algorithm, *EF, f"algorithm={algorithm}", "fl.rounds=2")
    assert {"topk_rel_error", f"{extra}_topk_rel_error"} <= set(df.columns)
    d = exp.upload.parts[0].dim
    assert (df["bytes_up"] == df["clients"] * 2 * _topk_bytes(d)).all()  # both parts sent sparse


def test_an_extra_upload_named_like_a_broadcast_extra_is_sent_as_its_difference(
    make_spec: Callable[..., RunSpec],
) -> None:
    exp = build_experiment(make_spec(*SMALL, *EF, "algorithm=fedfa"))
    assert exp.upload is not None
    assert {p.key: p.broadcast_ref for p in exp.upload.parts} == {"params": False, "anchors": True}


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("compression.k=100000000", "compression.k"),
        ("compression.k=0", "compression.k"),
        ("compression.levels=0", "compression.levels"),
        ("compression.ratio=0", "compression.ratio"),
        ("compression.ratio=1.5", "compression.ratio"),
        ("compression.name=gzip", "compression.name"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(
    make_spec: Callable[..., RunSpec], override: str, field: str
) -> None:
    with pytest.raises(ConfigError) as e:
        build_experiment(make_spec(*SMALL, "compression=topk", override))
    assert e.value.field == field
    assert "\n" not in str(e.value) and "valid" in str(e.value)


def test_error_feedback_without_a_compressor_is_refused() -> None:
    with pytest.raises(ConfigError, match="compression.error_feedback"):
        validate(compose_cfg([*SMALL, "compression.error_feedback=true"]))


def test_the_cli_refuses_k_larger_than_the_model_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["fedrun", *SMALL, "compression=topk", "compression.k=10000000", f"hydra.run.dir={tmp_path / 'r'}"]
    assert main_exit_code(monkeypatch, argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if "compression.k" in ln]
    assert len(err) == 1 and "valid: 1..25450" in err[0]


class _ShiftSum(UploadStage):
    """A test stage acting on the sum only: adds 1 to every entry of sum_i p_i delta_i."""

    name = "shift"
    order = 0

    def apply(self, delta, state, ctx):  # noqa: ANN001, ANN201
        return delta, state, {}

    def apply_sum(self, total: torch.Tensor, ctx: UploadContext) -> tuple[torch.Tensor, dict[str, float]]:
        return total + 1.0, {"shift": 1.0}


def test_a_stage_on_the_sum_moves_the_weighted_mean_by_its_change() -> None:
    m, d = 3, 5
    pipe = UploadPipeline([_ShiftSum()])
    w = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    ctx = UploadContext(0, torch.arange(m), 0, w, torch.device("cpu"))
    delta = torch.randn(m, d, generator=torch.Generator().manual_seed(0))
    sent, rows, diag = pipe.run_stages(delta, None, ctx)
    mean = (w.float().unsqueeze(1) * sent).sum(0)
    torch.testing.assert_close(mean, (w.float().unsqueeze(1) * delta).sum(0) + 1.0)
    assert rows == {} and diag == {"shift": 1.0}
    assert "shift" not in COMPRESSORS.names()  # a test stage, not registered


class _Negate(RowStage):
    """A test row stage: negates the rows ``rows`` (an entry 0 stays 0: equal to the client's, so kept as sent)."""

    name = "negate"
    order = 0

    def __init__(self, rows: list[int]) -> None:
        self.rows = rows

    def replace_rows(self, delta, ctx):  # noqa: ANN001, ANN201
        at = torch.tensor(self.rows, dtype=torch.long)
        return ((at, -delta.index_select(0, at)) if self.rows else None), {"negated": float(len(self.rows))}


class _Copy(UploadStage):
    """A test stage that reads the whole matrix and changes no value of it."""

    name = "copy"
    order = 1

    def apply(self, delta, state, ctx):  # noqa: ANN001, ANN201
        return delta.clone(), state, {}


@pytest.mark.parametrize("stages", [[0, 3], [2], [0, 3, "copy"], ["copy", 1]])  # (the stages in this order)
def test_a_row_stage_rebuilds_its_rows_only_as_the_whole_rebuild_would(stages: list) -> None:
    """A row stage (a model attack) is rebuilt on its rows only, the other uploads passed on as the clients sent
    them: bit for bit the uploads of rebuilding the whole matrix, also before or after a stage that reads it."""
    from fedrun.upload import pipeline

    m, gen = 4, torch.Generator().manual_seed(0)
    params = {"a": torch.randn(3, 5, generator=gen), "b": {"c": torch.randn(7, generator=gen).double()}}
    uploads = {k: v.unsqueeze(0) + torch.randn(m, *v.shape, generator=gen, dtype=v.dtype) for k, v in
               [("a", params["a"]), ("c", params["b"]["c"])]}  # fmt: skip
    uploads = {"a": uploads["a"], "b": {"c": uploads["c"]}}
    rows = [r for r in stages if isinstance(r, int)]
    order = [_Copy() if s == "copy" else None for s in stages if s == "copy" or s == rows[0]]
    pipe = UploadPipeline([_Negate(rows) if s is None else s for s in order])  # in the order given
    pipe.parts = [pipeline.Part("params", 15 + 7)]
    ctx = UploadContext(0, torch.arange(m), 0, torch.full((m,), 0.25, dtype=torch.float64), torch.device("cpu"))
    got, _, diag = pipe.apply(params, {}, {"params": uploads}, None, ctx)
    delta = pipeline._flat(uploads, params)
    want = pipeline._rebuild(uploads, params, pipe.run_stages(delta, None, ctx)[0], delta)
    for path in [("a",), ("b", "c")]:
        g, w, t = got["params"], want, uploads
        for k in path:
            g, w, t = g[k], w[k], t[k]
        assert torch.equal(g, w) and g.dtype == t.dtype
        kept = [i for i in range(m) if i not in rows]
        assert torch.equal(g[kept], t[kept]) and not torch.equal(g[rows], t[rows])
    assert diag == {"negated": float(len(rows))}
    none = UploadPipeline([_Negate([])])
    none.parts = pipe.parts
    unchanged, _, _ = none.apply(params, {}, {"params": uploads}, None, ctx)
    assert unchanged["params"] is uploads  # no row replaced: nothing rebuilt, nothing copied


def test_a_simulated_system_aggregates_and_times_the_compressed_uploads(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    over = ["system=dropout", "system.dropout=0.5", "fl.participation=1.0", *EF]
    df = _run(make_spec, tmp_path / "run", *over)
    d = 784 * 32 + 32 + 32 * 10 + 10
    assert (df["bytes_up"] == df["clients"] * _topk_bytes(d)).all()
    assert {"sim_seconds", "topk_rel_error"} <= set(df.columns)
    dense = _run(make_spec, tmp_path / "dense", *over[:3])
    assert (df["sim_seconds"] <= dense["sim_seconds"]).all()  # the same clients, smaller uploads


def test_a_method_that_uploads_part_of_the_model_compresses_that_part(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL, *EF, "algorithm=fedper"))
    assert exp.upload is not None
    shared = exp.upload.parts[0].dim
    assert exp.upload.parts[0].key == "params" and 0 < shared < 784 * 32 + 32 + 32 * 10 + 10
    from fedrun.run.rounds import train_round

    state = fresh_state(exp)
    r = train_round(exp, state, 0)
    assert r.bytes_up == 2 * _topk_bytes(shared)


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("m", [1, 3, 10, 100, 1000])
def test_weighted_sum_by_chunks_is_the_whole_float64_sum_bit_for_bit(m: int, uniform: bool) -> None:
    """The pipeline's weighted sum (chunks of columns) rounds as one float64 product and sum of the whole [m, d]
    did before it: DP-FedAvg adds its noise to this sum, so an earlier run and its resume stay bit-identical. (A float64
    matrix product per chunk, faster, differs in a few hundred of 50k float32 results at uniform weights 1/m.)"""
    from fedrun.upload import pipeline

    gen = torch.Generator().manual_seed(m)
    d = pipeline.SUM_CHUNK * 3 + 123  # four chunks, the last a partial one
    rows = torch.randn(m, d, generator=gen) * torch.logspace(-6, 2, d).float()
    w = torch.full((m,), 1.0 / m, dtype=torch.float64) if uniform else torch.rand(m, generator=gen, dtype=torch.float64)
    w /= w.sum()
    whole = (w.unsqueeze(1) * rows.double()).sum(0).to(rows.dtype)
    assert torch.equal(pipeline.weighted_sum(w, rows), whole)
