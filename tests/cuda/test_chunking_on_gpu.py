"""The memory-sized default chunk on the GPU, and out-of-memory in a chunk: one line naming ``hardware.chunk``.

The out-of-memory checks that fake the allocator's error run everywhere; the ones that exhaust a real
GPU's memory or read its memory statistics need one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedrun.cli import main as cli
from fedrun.core.errors import ConfigError
from fedrun.engines import chunking
from fedrun.engines.sampling import sample_clients
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.run.experiment import build_experiment
from tests.conftest import compose_cfg
from tests.cuda.gpu_util import DEVICE, ON_GPU, SMALL, spec_of

# wide enough that the clients, not the CUDA context or the data, dominate a chunk's memory
WIDE = ("model.hidden=[512,512]", "fl.batch_size=64", "data.max_train_samples=2000", "fl.clients=12")
CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB"
CPU_OOM = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 2147483648 bytes. Error code 12"


def raising(error: BaseException) -> object:
    """A stand-in for ``VectorisedEngine._train_chunk`` that fails with ``error``."""

    def train_chunk(*args: object) -> None:
        raise error

    return train_chunk


@pytest.mark.cuda
def test_default_chunk_is_sized_from_free_gpu_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not ON_GPU:
        pytest.skip("CUDA's free-memory query: GPU only")
    exp = build_experiment(
        spec_of(tmp_path / "cache", *WIDE, "hardware.engine=vectorised", f"hardware.device={DEVICE}")
    )
    free, _total = torch.cuda.mem_get_info(exp.device)
    budget = chunking.free_bytes(exp.device)
    assert 0.5 * free <= budget <= 0.7 * free  # 0.6 of what is free now (other processes may allocate meanwhile)
    params = exp.model.init_params()
    engine = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed)
    per_client = chunking.client_bytes(exp.algorithm, exp.fed, exp.spec.fl, params, {})
    monkeypatch.setattr(chunking, "free_bytes", lambda device: 5 * per_client + 1)
    assert engine.chunk_width(params, {}, 12) == 5


@pytest.mark.cuda
def test_memory_estimate_bounds_what_a_chunk_really_takes(tmp_path: Path) -> None:
    if not ON_GPU:
        pytest.skip("CUDA memory statistics: GPU only")
    exp = build_experiment(spec_of(tmp_path / "cache", *WIDE, f"hardware.device={DEVICE}"))
    fl, dev = exp.spec.fl, exp.device
    params = exp.model.init_params()
    per_client = chunking.client_bytes(exp.algorithm, exp.fed, fl, params, {})
    peak = {}
    for width in (2, 8):
        # a cohort of `width` clients in one chunk: a wider cohort cut into narrower chunks also holds every
        # client's upload and their concatenation, which is not what a chunk's width costs (the first GPU run
        # measured the same peak for chunks of 2 and of 8 of one 8-client cohort)
        clients = torch.arange(width)
        engine = VectorisedEngine(exp.algorithm, exp.fed, fl, exp.spec.seed, chunk=width)
        engine.train_cohort(0, params, {}, clients, {}, fl.lr)  # warm-up: kernels, workspaces, the allocator's pools
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        engine.train_cohort(0, params, {}, clients, {}, fl.lr)
        torch.cuda.synchronize(dev)
        peak[width] = torch.cuda.max_memory_allocated(dev) - base
    measured = (peak[8] - peak[2]) / 6  # what one more client in a chunk costs
    assert 0 < measured <= per_client, (
        f"measured {measured / 2**20:.1f} MiB per client, estimated {per_client / 2**20:.1f}"
    )


def test_out_of_memory_in_a_chunk_names_hardware_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the allocator's error faked: this is what the engine does with it, on any machine
    exp = build_experiment(spec_of(tmp_path / "cache", "hardware.engine=vectorised", "hardware.chunk=4"))
    monkeypatch.setattr(VectorisedEngine, "_train_chunk", raising(torch.cuda.OutOfMemoryError(CUDA_OOM)))
    params = exp.model.init_params()
    clients = torch.as_tensor(sample_clients(exp.spec.fl, 0, 0), dtype=torch.long)
    with pytest.raises(ConfigError) as err:
        exp.engine.train_cohort(0, params, {}, clients, {}, 0.05)
    assert err.value.field == "hardware.chunk" and "\n" not in str(err.value)
    assert str(err.value).startswith("hardware.chunk: out of memory on cpu training a chunk of 4 clients at once")
    assert str(err.value).endswith("; valid: a smaller chunk, e.g. hardware.chunk=2")
    assert err.value.__context__ is None and err.value.__cause__ is None  # no CUDA traceback kept or shown

    # the CPU allocator's failure reads the same; one client that does not fit points elsewhere
    monkeypatch.setattr(VectorisedEngine, "_train_chunk", raising(RuntimeError(CPU_OOM)))
    one = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, 0, chunk=1)
    with pytest.raises(ConfigError, match=r"chunk of 1 client at once; valid: a smaller fl.batch_size or model"):
        one.train_cohort(0, params, {}, clients, {}, 0.05)

    # any other error is not the engine's to rephrase
    monkeypatch.setattr(VectorisedEngine, "_train_chunk", raising(RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="^shape mismatch$"):
        exp.engine.train_cohort(0, params, {}, clients, {}, 0.05)


def test_out_of_memory_stops_the_cli_with_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(VectorisedEngine, "_train_chunk", raising(torch.cuda.OutOfMemoryError(CUDA_OOM)))
    cfg = compose_cfg(
        [*SMALL, "fl.rounds=2", "hardware.engine=vectorised", "output.quiet=true", f"cache_dir={tmp_path / 'cache'}"]
    )
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        cli.execute(cfg, run_dir, multirun=False)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedrun: error: hardware.chunk: out of memory on cpu training a chunk")
    assert "Traceback" not in err[0] and "CUDA out of memory" not in err[0]
    assert sorted(p.name for p in run_dir.iterdir()) == ["error.txt"]  # nothing half-written


@pytest.mark.cuda
def test_a_real_out_of_memory_on_the_gpu_is_one_line_and_frees_the_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not ON_GPU:
        pytest.skip("exhausts the GPU's memory: GPU only")
    exp = build_experiment(spec_of(tmp_path / "cache", *WIDE, f"hardware.device={DEVICE}"))
    dev = exp.device
    params = exp.model.init_params()
    per_client = chunking.client_bytes(exp.algorithm, exp.fed, exp.spec.fl, params, {})
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()  # no cached blocks from earlier tests: the chunk must ask the cap for new memory
    base = torch.cuda.memory_allocated(dev)
    total = torch.cuda.get_device_properties(dev).total_memory
    # the cap counts reserved memory: what this process holds now plus two clients' estimate; 12 cannot fit
    index = dev.index if dev.index is not None else torch.cuda.current_device()  # this call needs an index
    torch.cuda.set_per_process_memory_fraction(
        min(1.0, (torch.cuda.memory_reserved(dev) + 2 * per_client) / total), index
    )
    try:
        engine = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=12)
        with pytest.raises(ConfigError) as err:
            engine.train_cohort(0, params, {}, torch.arange(12), {}, exp.spec.fl.lr)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
    assert err.value.field == "hardware.chunk" and "\n" not in str(err.value)
    assert f"out of memory on {dev} training a chunk of 12 clients" in str(err.value)
    assert "hardware.chunk=6" in str(err.value)
    del err
    torch.cuda.synchronize(dev)
    assert torch.cuda.memory_allocated(dev) <= base + per_client  # the failed chunk's tensors were released
    # and the engine still works with a chunk that fits
    ok = VectorisedEngine(exp.algorithm, exp.fed, exp.spec.fl, exp.spec.seed, chunk=2)
    assert ok.train_cohort(0, params, {}, torch.arange(4), {}, exp.spec.fl.lr).samples > 0
