"""The system model's parts (fedrun/system/): keyed dropout and FedProx's stragglers, step budgets, the sample
count of a plan's prefix, device profiles and traces (and their refusals), availability, and how a round closes."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrun.config.registry import build_params
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.data.federated import batch_plan, num_local_steps
from fedrun.system.clock import local_steps_array, samples_for_steps, samples_for_steps_array
from fedrun.system.devices import SPEED_RANGE, TIERS, profile_devices, read_trace
from fedrun.system.model import (
    RoundPlan,
    SystemModel,
    dropout_mask,
    over_sample,
    straggler_budgets,
    straggler_mask,
)
from fedrun.system.settings import SystemSettings as SystemConfig

TRACE = Path(__file__).with_name("sample_trace.json")


def test_dropout_is_keyed_by_seed_round_and_client() -> None:
    clients = np.arange(40)
    rates = np.full(40, 0.3)
    a = dropout_mask(0, 5, clients, rates)
    assert 0 < a.sum() < 40
    assert np.array_equal(a, dropout_mask(0, 5, clients, rates))  # the same draw again
    assert np.array_equal(a[10:20], dropout_mask(0, 5, clients[10:20], rates[10:20]))  # whoever else is sampled
    assert not np.array_equal(a, dropout_mask(0, 6, clients, rates))  # another round, other draws
    assert not dropout_mask(0, 5, clients, np.zeros(40)).any()  # p = 0: nobody
    assert dropout_mask(0, 5, clients, np.ones(40)).all()  # p = 1: everybody


@pytest.mark.parametrize(("m", "share", "count"), [(10, 0.0, 0), (10, 0.5, 5), (5, 0.5, 3), (10, 0.9, 9), (7, 1.0, 7)])
def test_straggler_count_is_fedprox_rounding(m: int, share: float, count: int) -> None:
    # FedProx: active = round(m * (1 - drop_percent)) (Python's round); the rest straggle
    mask = straggler_mask(3, 1, m, share)
    assert mask.sum() == count == m - round(m * (1 - share))
    assert np.array_equal(mask, straggler_mask(3, 1, m, share))


def test_straggler_budgets_stay_below_the_full_work() -> None:
    fl = FLConfig(local_epochs=5, batch_size=10)
    clients, sizes = np.arange(30), np.full(30, 45)  # 5 batches per epoch
    epochs = straggler_budgets(0, 2, clients, sizes, fl, "epochs")
    assert set((epochs // 5).tolist()) <= {1, 2, 3, 4} and np.all(epochs % 5 == 0) and len(set(epochs.tolist())) > 1
    steps = straggler_budgets(0, 2, clients, sizes, fl, "steps")
    assert steps.min() >= 1 and steps.max() <= num_local_steps(45, fl) - 1
    one = straggler_budgets(0, 2, clients, sizes, FLConfig(local_epochs=1, batch_size=50), "steps")
    assert np.all(one == 0)  # one step in all: nothing below it but nothing
    fixed = FLConfig(local_epochs=5, local_steps=4, batch_size=10)  # no epochs: epochs work is counted in steps
    assert np.array_equal(
        straggler_budgets(0, 2, clients, sizes, fixed, "epochs"),
        straggler_budgets(0, 2, clients, sizes, fixed, "steps"),
    )
    assert set(straggler_budgets(0, 2, clients, sizes, fixed, "epochs").tolist()) <= {1, 2, 3}


@pytest.mark.parametrize("fl", [FLConfig(local_epochs=3, batch_size=16), FLConfig(local_steps=7, batch_size=16)])
def test_samples_for_steps_is_the_plan_prefix(fl: FLConfig) -> None:
    for n in (5, 16, 40, 53):
        plan = batch_plan(torch.arange(n), fl, 0, 0, 0)
        for k in range(len(plan) + 1):
            assert samples_for_steps(n, fl, k) == sum(int(b.numel()) for b in plan[:k])


@pytest.mark.parametrize("fl", [FLConfig(local_epochs=3, batch_size=16), FLConfig(local_steps=7, batch_size=16)])
def test_the_clocks_array_counts_are_the_scalar_ones(fl: FLConfig) -> None:
    n = np.array([0, 1, 5, 16, 17, 40, 53, 600])
    assert local_steps_array(n, fl).tolist() == [num_local_steps(int(x), fl) for x in n]
    sizes, steps = (a.ravel() for a in np.meshgrid(n, np.array([-1, 0, 1, 2, 3, 4, 7, 9, 40])))
    got = samples_for_steps_array(sizes, fl, steps)
    assert got.dtype == np.float64
    assert got.tolist() == [float(samples_for_steps(int(a), fl, int(b))) for a, b in zip(sizes, steps, strict=True)]


def test_client_seconds_are_the_clock_formula_bit_for_bit() -> None:
    fl, sizes = FLConfig(clients=7, local_epochs=2, batch_size=16), np.array([0, 5, 16, 40, 53, 7, 600])
    model = SystemModel(SystemConfig(devices="tiers"), fl, 3, sizes)
    workers, dev = np.array([1, 3, 4, 0, 6]), model.devices
    full = np.array([num_local_steps(int(sizes[w]), fl) for w in workers])
    for flops in (3e5, 7e5):  # the cached terms follow the model's cost (and the bytes, and the FL settings)
        model.flops_per_sample = flops
        for steps, down, up in ((full, 1e6, 2e5), (np.array([1, 2, 3, 0, 5]), 1e6, 2e5), (full, 3e6, 1e5)):
            pairs = zip(workers.tolist(), steps.tolist(), strict=True)
            samples = np.array([samples_for_steps(int(sizes[w]), fl, s) for w, s in pairs], dtype=np.float64)
            want = down / dev.download[workers] + samples * dev.seconds_per_sample(flops)[workers]
            want = want + up / dev.upload[workers]
            assert np.array_equal(model.client_seconds(workers, steps, fl, down, up), want)


def test_profiles() -> None:
    uniform = profile_devices("uniform", 6, 0)
    assert np.all(uniform.flops == TIERS["mid"][0]) and np.all(uniform.upload == TIERS["mid"][1])
    tiers = profile_devices("tiers", 200, 0)
    assert set(tiers.flops.tolist()) == {t[0] for t in TIERS.values()}
    assert np.array_equal(tiers.flops[:50], profile_devices("tiers", 50, 0).flops)  # keyed by (seed, client)


def test_sample_trace_reads_both_units() -> None:
    dev = read_trace(str(TRACE), 10)
    sps = dev.seconds_per_sample(1e6)
    assert sps[0] == 1e6 / 4e10  # fedrun's FLOP/s
    assert sps[5] == 3 * 162.0 / 1000  # FedScale's ms per inference sample, x3 for training
    assert dev.upload[5] == dev.download[5] == 5648.1 * 1000 / 8  # FedScale's kbit/s
    assert dev.dropout[2] == 0.5 and np.isnan(dev.dropout[0])
    assert dev.online(np.array([3, 0]), 100.0).tolist() == [True, True]
    assert dev.online(np.array([3, 0]), 400.0).tolist() == [False, True]
    assert dev.online(np.array([3]), 1200.0 + 650.0).tolist() == [True]  # the trace repeats every finish_time


def _write(tmp_path: Path, clients: dict[str, dict[str, object]]) -> str:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"clients": clients}))
    return str(path)


GOOD = {"flops": 1e9, "upload": 1e6, "download": 1e6}


@pytest.mark.parametrize(
    ("clients", "message"),
    [
        ({"0": GOOD, "1": GOOD, "7": GOOD}, "client '7' is not one of this run's clients 0..2"),
        ({"0": GOOD, "1": GOOD, "x": GOOD}, "client 'x' is not one of this run's clients"),
        ({"0": GOOD, "1": GOOD}, r"no device for client\(s\) \[2\]"),
        ({"0": GOOD, "1": GOOD, "2": {**GOOD, "dropout": -0.1}}, "client 2: dropout must be a finite number >= 0"),
        ({"0": GOOD, "1": GOOD, "2": {**GOOD, "dropout": 1.5}}, "client 2: dropout must be in"),
        ({"0": GOOD, "1": GOOD, "2": {**GOOD, "flops": -1}}, "client 2: flops must be a finite number > 0"),
        ({"0": GOOD, "1": GOOD, "2": {"flops": 1e9}}, "client 2: communication must be"),
        ({"0": GOOD, "1": GOOD, "2": {**GOOD, "active": [0], "inactive": []}}, "active and inactive must be lists"),
        ({"0": GOOD, "1": GOOD, "2": GOOD, "01": GOOD}, r"client 1 is named twice \('1' and '01'\)"),
        ({"0": GOOD, "1": GOOD, "²": GOOD}, "client id '²' is not plain decimal digits"),
        (
            {"0": GOOD, "1": GOOD, "2": {**GOOD, "flops": 1e-101}},
            r"client 2: flops 1e-101 is outside \[1e-100, 1e\+100\]",
        ),
        ({"0": GOOD, "1": GOOD, "2": {**GOOD, "upload": 1e101}}, r"client 2: upload 1e\+101 is outside"),
    ],
)
def test_bad_traces_are_refused_in_one_line(tmp_path: Path, clients: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        read_trace(_write(tmp_path, clients), 3)
    assert e.value.field == "system.trace" and "\n" not in str(e.value)


def test_fedscale_pickles_are_read_as_plain_data_only(tmp_path: Path) -> None:
    cap = tmp_path / "devices.pkl"
    cap.write_bytes(
        pickle.dumps(
            {0: {"computation": 100.0, "communication": 800.0}, 1: {"computation": 50.0, "communication": 80.0}}
        )
    )
    (tmp_path / "devices.behave.pkl").write_bytes(
        pickle.dumps({1: {"active": [0], "inactive": [10], "finish_time": 20}})
    )
    dev = read_trace(str(cap), 2)
    assert dev.ms_per_sample.tolist() == [100.0, 50.0] and dev.online(np.array([0, 1]), 15.0).tolist() == [True, False]
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({0: {"computation": np.float64(1.0), "communication": 1.0}}))  # a class inside
    with pytest.raises(ConfigError, match="refused numpy"):
        read_trace(str(evil), 1)
    with pytest.raises(ConfigError, match="no such file"):
        read_trace(str(tmp_path / "absent.json"), 1)
    os.mkfifo(tmp_path / "fifo.pkl")  # not waited on
    with pytest.raises(ConfigError, match=r"fifo\.pkl: not a regular file \(a FIFO\)"):
        read_trace(str(tmp_path / "fifo.pkl"), 1)


def test_a_trace_at_the_ends_of_the_speed_range_keeps_the_clock_finite(tmp_path: Path) -> None:
    slow = {"flops": SPEED_RANGE[0], "upload": SPEED_RANGE[0], "download": SPEED_RANGE[0]}
    dev = read_trace(_write(tmp_path, {"0": slow, "1": {"computation": SPEED_RANGE[1], "communication": 1.0}}), 2)
    with np.errstate(all="raise"):  # an overflow would raise here
        assert np.isfinite(dev.seconds_per_sample(1e15)).all()
        assert np.isfinite(1e15 / dev.upload).all() and np.isfinite(1e15 / dev.download).all()


def test_config_refusals() -> None:
    for field, kwargs in (
        ("dropout", {"dropout": -0.2}),
        ("stragglers", {"stragglers": 1.5}),
        ("straggler_policy", {"straggler_policy": "wait"}),
        ("straggler_work", {"straggler_work": "batches"}),
        ("devices", {"devices": "phones"}),
        ("trace", {"devices": "trace"}),
        ("devices", {"trace": "x.json"}),
        ("deadline", {"deadline": -1.0}),
        ("over_selection", {"over_selection": 0.5}),
    ):
        with pytest.raises(ConfigError) as e:
            build_params(SystemConfig, kwargs, "system", ignore=())
        assert e.value.field == f"system.{field}"
    assert SystemConfig().ideal and SystemConfig(dropout=0.0, stragglers=0.0).ideal
    assert not SystemConfig(devices="tiers").ideal


def _model(**kwargs: object) -> SystemModel:
    fl = FLConfig(clients=6, local_epochs=2, batch_size=10)
    return SystemModel(SystemConfig(**kwargs), fl, 0, np.full(6, 30))  # type: ignore[arg-type]


def _plan(n: int, dropped: list[int] | None = None) -> RoundPlan:
    d = np.zeros(n, dtype=bool)
    d[dropped or []] = True
    return RoundPlan(0, np.arange(n), ~d, d, np.zeros(n, dtype=bool), None)


def test_close_by_deadline_and_over_selection() -> None:
    seconds = np.array([3.0, 1.0, 5.0, 2.0])
    # no deadline, no over-selection: everybody reports, the round lasts until the last one
    c = _model(devices="tiers").close(_plan(4), 4, seconds)
    assert c.reports.all() and c.seconds == 5.0 and (c.late, c.discarded) == (0, 0)
    # a deadline of 2.5 s: two are late, and the server waited until the deadline
    c = _model(deadline=2.5).close(_plan(4), 4, seconds)
    assert c.reports.tolist() == [False, True, False, True] and c.seconds == 2.5 and c.late == 2
    # over-selection: the first 2 to report are kept, the round ends at the second
    c = _model(over_selection=2.0).close(_plan(4), 2, seconds)
    assert c.reports.tolist() == [False, True, False, True] and c.seconds == 2.0 and c.discarded == 2
    # a deadline no client meets: nobody reports, honestly, and the round lasts the deadline
    c = _model(deadline=0.5).close(_plan(4), 4, seconds)
    assert not c.reports.any() and c.seconds == 0.5 and c.late == 4


def test_over_sample_keeps_the_cohort_size() -> None:
    fl = FLConfig(clients=20, participation=0.25)
    ids, keep = over_sample(fl, 0, 3, 1.3)
    assert keep == 5 and len(ids) == 7 and np.all(np.diff(ids) > 0)
    assert np.array_equal(ids, over_sample(fl, 0, 3, 1.3)[0])


def test_plan_drops_or_cuts_stragglers() -> None:
    fl = FLConfig(clients=6, local_epochs=3, batch_size=10)
    clients = np.arange(6)
    drop = SystemModel(SystemConfig(stragglers=0.5), fl, 0, np.full(6, 30)).plan(0, clients, fl, 0.0)
    assert drop.straggles.sum() == 3 and np.array_equal(drop.works, ~drop.straggles) and drop.budgets is None
    part = SystemModel(SystemConfig(stragglers=0.5, straggler_policy="partial"), fl, 0, np.full(6, 30)).plan(
        0, clients, fl, 0.0
    )
    assert np.array_equal(part.straggles, drop.straggles) and part.works.all()  # the same stragglers either way
    assert part.budgets is not None
    full = torch.tensor(9)  # 3 epochs x 3 batches
    assert torch.all(part.budgets[torch.as_tensor(~part.straggles)] == full)
    assert set(part.budgets[torch.as_tensor(part.straggles)].tolist()) <= {3, 6}


def test_an_ideal_system_keeps_a_runs_identity() -> None:
    from fedrun.config.identity import comparable, config_key, fingerprint

    base = {"seed": 0, "fl": {"rounds": 3}}
    ideal = {**base, "system": {"dropout": 0.0, "stragglers": 0, "devices": "uniform", "over_selection": 1}}
    assert config_key(ideal) == config_key(base) and fingerprint(ideal) == fingerprint(base)
    lossy = {**base, "system": {**ideal["system"], "dropout": 0.1}}
    assert config_key(lossy) != config_key(base) and comparable(lossy)["system"]["dropout"] == 0.1
