"""The compressors and error feedback on the cohort's rows: what each keeps, its bits, its keyed randomness, and
that error feedback's residual holds exactly what was dropped."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.upload.base import COMPRESSORS, UploadContext
from fedrun.upload.compressors.qsgd import QSGD
from fedrun.upload.compressors.randk import RandK
from fedrun.upload.compressors.sign import Sign
from fedrun.upload.compressors.topk import TopK
from tests.conftest import main_exit_code
from tests.upload.upload_util import pipeline_of as build_pipeline


def _stage(make_spec: Callable[..., RunSpec], *overrides: str, dim: int = 1000):  # noqa: ANN202 - a Compressor
    pipe = build_pipeline(make_spec(*overrides))
    assert pipe is not None and len(pipe.stages) == 1
    pipe.stages[0].check(dim, "params")
    return pipe.stages[0]


def _ctx(m: int, rnd: int = 0, seed: int = 0) -> UploadContext:
    return UploadContext(rnd, torch.arange(m), seed, torch.full((m,), 1 / m, dtype=torch.float64), torch.device("cpu"))


def _rows(m: int = 4, d: int = 1000, seed: int = 1) -> torch.Tensor:
    return torch.randn(m, d, generator=torch.Generator().manual_seed(seed))


def test_every_compressor_option_names_a_registered_compressor() -> None:
    from fedrun.config.location import CONF_DIR

    options = {p.stem for p in (CONF_DIR / "compression").glob("*.yaml")} - {"none"}
    assert options <= set(COMPRESSORS.names())


def test_topk_with_k_all_and_no_error_feedback_is_the_identity(make_spec: Callable[..., RunSpec]) -> None:
    stage = _stage(make_spec, "compression=topk", "compression.k=1000")
    x = _rows()
    sent, state, _ = stage.apply(x, None, _ctx(4))
    assert state is None
    assert torch.equal(sent, x)
    assert stage.bits_per_client(1000) == 1000 * (32 + 10)


def test_topk_keeps_the_k_largest_magnitudes(make_spec: Callable[..., RunSpec]) -> None:
    stage = _stage(make_spec, "compression=topk", "compression.ratio=0.05")
    x = _rows()
    sent, _, _ = stage.apply(x, None, _ctx(4))
    assert ((sent != 0).sum(1) == 50).all()
    kept_min = torch.where(sent != 0, x.abs(), torch.inf).min(1).values
    dropped_max = torch.where(sent == 0, x.abs(), 0.0).max(1).values
    assert (kept_min >= dropped_max).all()
    assert torch.equal(sent[sent != 0], x[sent != 0])


@pytest.mark.parametrize(
    "overrides",
    [
        ["compression=topk", "compression.ratio=0.05"],
        ["compression=randk", "compression.ratio=0.05"],
        ["compression=qsgd", "compression.levels=2"],
        ["compression=sign"],
    ],
    ids=["topk", "randk", "qsgd", "sign"],
)
def test_error_feedback_residual_carries_what_was_dropped(
    make_spec: Callable[..., RunSpec], overrides: list[str]
) -> None:
    stage = _stage(make_spec, *overrides, "compression.error_feedback=true")
    assert stage.stateful
    x, e = _rows(seed=1), _rows(seed=2) * 0.1
    sent, new_e, diag = stage.apply(x, e, _ctx(4))
    assert new_e is not None
    torch.testing.assert_close(sent + new_e, x + e, rtol=0, atol=1e-6)  # p_i = C(p_i) + e_i', nothing lost
    # what was sent is C(x + e): the compressor on the fed-back sum, not on x
    no_ef = _stage(make_spec, *overrides)
    torch.testing.assert_close(sent, no_ef.apply(x + e, None, _ctx(4))[0], rtol=0, atol=0)
    assert diag[f"{stage.name}_residual_norm"] == pytest.approx(float(new_e.norm(dim=1).mean()))


def test_topk_error_feedback_residual_is_exactly_the_dropped_entries(make_spec: Callable[..., RunSpec]) -> None:
    stage = _stage(make_spec, "compression=topk", "compression.ratio=0.1", "compression.error_feedback=true")
    x = _rows()
    sent, e, _ = stage.apply(x, torch.zeros_like(x), _ctx(4))
    assert e is not None
    assert torch.equal(torch.where(sent != 0, 0.0, x), e)


def test_randk_indices_are_keyed_by_seed_round_and_client(make_spec: Callable[..., RunSpec]) -> None:
    stage = _stage(make_spec, "compression=randk", "compression.ratio=0.1")
    x = _rows(m=2) + 10  # no zero entry: the kept ones are the non-zeros
    a = stage.apply(x, None, _ctx(2))[0] != 0
    assert torch.equal(a, stage.apply(x, None, _ctx(2))[0] != 0)  # the same key, the same indices
    assert not torch.equal(a[0], a[1])  # another client, others
    assert not torch.equal(a, stage.apply(x, None, _ctx(2, rnd=1))[0] != 0)  # another round, others
    assert ((a.sum(1)) == 100).all()
    assert stage.bits_per_client(1000) == 100 * 32


def test_qsgd_is_unbiased_on_its_levels(make_spec: Callable[..., RunSpec]) -> None:
    stage = _stage(make_spec, "compression=qsgd", "compression.levels=4", "compression.bucket=null")
    x = _rows(m=1, d=200)
    draws = torch.stack([stage.apply(x, None, _ctx(1, rnd=r))[0][0] for r in range(2000)])
    norm = x.norm()
    levels = draws.abs() / norm * 4
    torch.testing.assert_close(levels, levels.round(), rtol=0, atol=1e-4)  # each entry: ||x|| l / s, l in 0..s
    assert (torch.sign(draws) * torch.sign(x) >= 0).all()
    err = (draws.mean(0) - x[0]).abs().max()
    assert err < 4 * float(norm) / 4 / math.sqrt(2000)  # E[Q_s(x)] = x (Alistarh et al. 2017, Lemma 3.1)
    assert stage.bits_per_client(200) == 32 + 200 * (1 + 3)


def _whole_vector_qsgd(x: torch.Tensor, s: int, ctx: UploadContext) -> torch.Tensor:
    """QSGD as fedrun computed it before compression.bucket existed: one 2-norm per row."""
    norm = x.norm(dim=1, keepdim=True)
    level = x.abs() / norm.clamp_min(torch.finfo(x.dtype).tiny) * s
    low = level.floor()
    u = torch.stack([torch.rand(x.shape[1], generator=ctx.generator("qsgd", int(c))) for c in ctx.clients])
    return norm * x.sign() * ((low + (u < level - low).to(x.dtype)) / s)


@pytest.mark.parametrize("bucket", ["null", "1000", "5000"])
def test_qsgd_with_no_bucket_or_one_the_row_is_whole_vector_qsgd_bit_for_bit(
    make_spec: Callable[..., RunSpec], bucket: str
) -> None:
    stage = _stage(make_spec, "compression=qsgd", "compression.levels=4", f"compression.bucket={bucket}")
    x = _rows()
    for rnd in range(3):
        assert torch.equal(stage.apply(x, None, _ctx(4, rnd=rnd))[0], _whole_vector_qsgd(x, 4, _ctx(4, rnd=rnd)))
    assert stage.bits_per_client(1000) == 32 + 1000 * (1 + 3)  # one norm


def test_qsgd_buckets_are_quantised_with_their_own_norm_and_unbiased(make_spec: Callable[..., RunSpec]) -> None:
    # buckets of 64 over 200 entries: 64, 64, 64 and a last one of 8; the first bucket's entries 100x the others'
    stage = _stage(make_spec, "compression=qsgd", "compression.levels=4", "compression.bucket=64", dim=200)
    x = _rows(m=1, d=200)
    x[0, :64] *= 100.0
    starts = [0, 64, 128, 192, 200]
    norms = torch.cat([x[0, a:b].norm().expand(b - a) for a, b in zip(starts, starts[1:], strict=False)])
    draws = torch.stack([stage.apply(x, None, _ctx(1, rnd=r))[0][0] for r in range(2000)])
    levels = draws.abs() / norms * 4
    torch.testing.assert_close(levels, levels.round(), rtol=0, atol=1e-4)  # each entry: ||bucket|| l / s
    assert levels.max() <= 4 + 1e-4
    for a, b in zip(starts, starts[1:], strict=False):  # E[Q_s(v)] = v for each bucket v (their Lemma 3.1, sec. 4)
        err = (draws[:, a:b].mean(0) - x[0, a:b]).abs().max()
        assert err < 4 * float(norms[a]) / 4 / math.sqrt(2000), (a, b)
    # the small buckets keep their own resolution: a whole-vector norm would round them all to 0 or 100x their size
    assert (draws[:, 64:].abs() < float(norms[64]) + 1e-4).all()
    assert stage.bits_per_client(200) == 4 * 32 + 200 * (1 + 3)  # a 32-bit norm for each of the 4 buckets


def test_qsgd_counts_a_norm_per_bucket_in_the_bytes_up(make_spec: Callable[..., RunSpec]) -> None:
    stage = _stage(make_spec, "compression=qsgd")  # the defaults: s = 16, d = 512 (Alistarh et al. 2017, sec. 5)
    assert stage.bucket == 512 and stage.cfg.levels == 16
    assert stage.bits_per_client(1000) == 2 * 32 + 1000 * (1 + 5)
    assert stage.bits_per_client(1024) == 2 * 32 + 1024 * (1 + 5)
    assert stage.bits_per_client(1025) == 3 * 32 + 1025 * (1 + 5)
    assert stage.bits_per_client(512) == 32 + 512 * (1 + 5)


@pytest.mark.parametrize("bucket", ["0", "-3"])
def test_qsgd_refuses_a_bucket_below_one_naming_it(make_spec: Callable[..., RunSpec], bucket: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_spec("compression=qsgd", f"compression.bucket={bucket}")
    assert e.value.field == "compression.bucket"
    assert "\n" not in str(e.value) and "valid" in str(e.value)


def test_the_cli_refuses_a_bucket_below_one_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture
) -> None:
    argv = ["fedrun", "compression=qsgd", "compression.bucket=0", f"hydra.run.dir={tmp_path}/r"]
    assert main_exit_code(monkeypatch, argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if "compression.bucket" in ln]
    assert len(err) == 1 and "valid" in err[0]


def test_sign_scales_by_the_mean_magnitude(make_spec: Callable[..., RunSpec]) -> None:
    stage = _stage(make_spec, "compression=sign")
    x = _rows()
    sent, e, _ = stage.apply(x, torch.zeros_like(x), _ctx(4))
    assert e is not None  # conf/compression/sign.yaml: EF-signSGD, error feedback on
    torch.testing.assert_close(sent, x.abs().mean(1, keepdim=True) * x.sign())
    assert stage.bits_per_client(1000) == 1000 + 32


def test_the_classes_are_the_registered_ones() -> None:
    assert [COMPRESSORS.get(n).obj for n in ("topk", "randk", "qsgd", "sign")] == [TopK, RandK, QSGD, Sign]
