"""The system model of a run (``system.*``): before a round, who fails to report and how much each straggler
works (:meth:`SystemModel.plan`); after it, each client's simulated time, who met the deadline and who was among
the first to report (:meth:`SystemModel.close`).

Order of a round (docs/systems.md): the cohort is sampled (``over_selection`` x the cohort under
over-selection); a client fails to report w.p. its dropout rate (:func:`dropout_mask`), or because its trace says
it is offline at the round's start on the simulated clock; a share ``stragglers`` of the cohort straggles
(:func:`straggler_mask`, FedProx's protocol) and, under ``straggler_policy=drop``, is not trained (FedProx's FedAvg
trains only the others), under ``partial`` runs a uniformly drawn part of its work (:func:`straggler_budgets`). The
clients left train; the round closes at the deadline, or when the first ``target`` of them have reported
(over-selection), or when the last one has. Clients that fail, are dropped, are late or are not among the first
upload nothing and keep their client state. Every draw is keyed by (seed, purpose, round[, client]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from fedrun.algorithms.base import Algorithm
from fedrun.config.schema import FLConfig
from fedrun.core.rng import np_rng
from fedrun.core.tree import Tensors, Tree
from fedrun.data.federated import FederatedData, num_local_steps
from fedrun.system.clock import flops_per_sample, local_steps_array, samples_for_steps_array
from fedrun.system.devices import Devices
from fedrun.system.registries import DEVICE_PROFILES
from fedrun.system.settings import SystemSettings


def over_sample(fl: FLConfig, seed: int, rnd: int, factor: float) -> tuple[np.ndarray, int]:
    """The over-selected cohort of round ``rnd`` (sorted ids) and how many of it the round keeps: fixed sampling
    draws min(N, ceil(factor x m)) clients, Bernoulli sampling each client w.p. min(1, factor x C); the round keeps
    m = max(int(C N), 1) (the cohort without over-selection). Keyed by (seed, "sample-over", round)."""
    rng = np_rng(seed, "sample-over", rnd)
    n, m = fl.clients, fl.cohort_size
    if fl.sampling == "fixed":
        return np.sort(rng.choice(n, min(n, math.ceil(factor * m)), replace=False)), m
    chosen = np.flatnonzero(rng.random(n) < min(1.0, factor * fl.participation))
    return (chosen if chosen.size else np.array([rng.integers(n)])), m


def dropout_mask(seed: int, rnd: int, clients: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """True where client ``clients[j]`` fails to report in round ``rnd``: u < p_j, u drawn by (seed, round, client).
    A rate of 0 never drops (u >= 0), so p = 0 is the ideal system."""
    out = np.zeros(len(clients), dtype=bool)
    for j, c in enumerate(clients.tolist()):
        if rates[j] > 0:
            out[j] = np_rng(seed, "dropout", rnd, c).random() < rates[j]
    return out


def straggler_mask(seed: int, rnd: int, m: int, share: float) -> np.ndarray:
    """True at the cohort positions that straggle: FedProx's ``m - round(m (1 - share))`` of the m clients, chosen
    without replacement by (seed, "stragglers", round); 0 stragglers when ``share`` is 0."""
    out = np.zeros(m, dtype=bool)
    k = m - round(m * (1.0 - share))
    if k > 0:
        out[np_rng(seed, "stragglers", rnd).choice(m, k, replace=False)] = True
    return out


def straggler_budgets(
    seed: int, rnd: int, clients: np.ndarray, sizes: np.ndarray, fl: FLConfig, work: str
) -> np.ndarray:
    """Local steps of each straggler: ``epochs``: e ~ U{1..E-1} epochs (FedProx's ``randint(1, E)``), e x
    ceil(n_i/B) steps; ``steps``, and ``epochs`` when ``fl.local_steps`` is set (a run without epochs):
    s ~ U{1..S_i-1} of its S_i steps. With nothing below the full amount (E or S_i = 1) a straggler runs 0 steps.
    Drawn by (seed, "straggler-work", round, client)."""
    out = np.zeros(len(clients), dtype=np.int64)
    if fl.local_steps is not None:
        work = "steps"
    for j, (c, n) in enumerate(zip(clients.tolist(), sizes.tolist(), strict=True)):
        full = fl.local_epochs if work == "epochs" else num_local_steps(n, fl)
        if full < 2 or n == 0:
            continue
        k = int(np_rng(seed, "straggler-work", rnd, c).integers(1, full))
        out[j] = k * math.ceil(n / fl.batch_size) if work == "epochs" else k
    return out


@dataclass
class RoundPlan:
    """Round ``rnd``'s decisions before training, over ``clients`` (the trained set, sorted ids): ``works`` who
    trains; ``dropped`` who failed to report (dropout or offline); ``straggles`` who straggles; ``budgets`` the
    local steps of each worker (None: all run their full plans)."""

    rnd: int
    clients: np.ndarray
    works: np.ndarray
    dropped: np.ndarray
    straggles: np.ndarray
    budgets: torch.Tensor | None


@dataclass
class RoundClose:
    """Round ``rnd`` after training: ``reports`` (over the workers) who is aggregated, ``late`` who missed the
    deadline, ``discarded`` who reported after the first ``target`` (over-selection), ``seconds`` the round's
    simulated length."""

    reports: np.ndarray
    late: int
    discarded: int
    seconds: float


class SystemModel:
    """A run's system: its devices (from the registered profile ``system.devices`` names), its rates and its
    deadline (``system.*``); stateless across rounds (the clock is the system capability's state), so a resumed run
    plans every round as the uninterrupted one did."""

    def __init__(self, config: SystemSettings, fl: FLConfig, seed: int, sizes: np.ndarray) -> None:
        self.config, self.fl, self.seed = config, fl, seed
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.devices: Devices = DEVICE_PROFILES.get(config.devices).obj.devices(config, fl.clients, seed)
        self.rates = np.where(np.isnan(self.devices.dropout), config.dropout, self.devices.dropout)
        self.flops_per_sample: float | None = None  # counted once (:meth:`count_flops`, fedrun/system/clock.py)
        self._steps: tuple[tuple[int | None, int, int], np.ndarray] | None = None  # (setting, every client's steps)
        # each client's download and upload seconds, seconds per sample, full steps and time for them, by setting
        self._terms: (
            tuple[tuple[float | int | None, ...], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None
        ) = None

    def count_flops(self, algorithm: Algorithm, fed: FederatedData, params: Tensors, extras: Tree, lr: float) -> None:
        """Count one local gradient's FLOPs per sample of the run's method and model, once (the first round's)."""
        if self.flops_per_sample is None:
            self.flops_per_sample = flops_per_sample(algorithm, fed, params, extras, lr)

    def sample(self, rnd: int, sampled: np.ndarray) -> tuple[np.ndarray, int]:
        """The round's cohort and how many of it to keep: ``sampled`` (fedrun's sampling) as it is, or the
        over-selected cohort (:func:`over_sample`)."""
        if self.config.over_selection > 1:
            return over_sample(self.fl, self.seed, rnd, self.config.over_selection)
        return sampled, len(sampled)

    def plan(self, rnd: int, clients: np.ndarray, fl: FLConfig, clock: float) -> RoundPlan:
        """Who trains in round ``rnd`` (``fl``: the round's settings, :meth:`Algorithm.round_fl`), and how much."""
        cfg = self.config
        dropped = dropout_mask(self.seed, rnd, clients, self.rates[clients]) | ~self.devices.online(clients, clock)
        straggles = straggler_mask(self.seed, rnd, len(clients), cfg.stragglers)
        works = ~dropped & ~(straggles & (cfg.straggler_policy == "drop"))
        budgets = None
        if cfg.straggler_policy == "partial" and bool((straggles & works).any()):
            sizes = self.sizes[clients]
            full = np.array([num_local_steps(int(n), fl) for n in sizes], dtype=np.int64)
            cut = straggler_budgets(self.seed, rnd, clients, sizes, fl, cfg.straggler_work)
            budgets = torch.as_tensor(np.where(straggles, cut, full)[works], dtype=torch.long)
        return RoundPlan(rnd, clients, works, dropped, straggles, budgets)

    def full_steps(self, fl: FLConfig) -> np.ndarray:
        """The local steps of every client's full plan (``fl``: the round's settings), counted once per setting."""
        key = (fl.local_steps, fl.local_epochs, fl.batch_size)
        if self._steps is None or self._steps[0] != key:
            self._steps = (key, local_steps_array(self.sizes, fl))
        return self._steps[1]

    def planned_steps(self, clients: np.ndarray, fl: FLConfig) -> np.ndarray:
        """The local steps each of ``clients`` runs with its full plan."""
        out: np.ndarray = self.full_steps(fl)[clients]
        return out

    def client_seconds(
        self, workers: np.ndarray, steps: np.ndarray, fl: FLConfig, down: float, up: float
    ) -> np.ndarray:
        """Each worker's simulated time: download ``down`` bytes, train its ``steps``, upload ``up`` bytes."""
        key = (self.flops_per_sample, down, up, fl.local_steps, fl.local_epochs, fl.batch_size)
        if self._terms is None or self._terms[0] != key:  # once per run (per setting): every client's terms
            dev = self.devices
            per_sample = dev.seconds_per_sample(self.flops_per_sample or 0.0)
            down_s, up_s, full_steps = down / dev.download, up / dev.upload, self.full_steps(fl)
            full = down_s + samples_for_steps_array(self.sizes, fl, full_steps) * per_sample + up_s
            self._terms = (key, down_s, per_sample, up_s, full_steps, full)
        _, down_s, per_sample, up_s, full_steps, full = self._terms
        if bool((full_steps[workers] == steps).all()):  # (everyone ran its full plan: the times of the terms above)
            whole: np.ndarray = full[workers]
            return whole
        out: np.ndarray = (
            down_s[workers]
            + samples_for_steps_array(self.sizes[workers], fl, steps) * per_sample[workers]
            + up_s[workers]
        )
        return out

    def close(self, plan: RoundPlan, target: int, seconds: np.ndarray) -> RoundClose:
        """Who of the workers (``seconds``: their simulated times, in plan order) reports: those within the
        deadline, and of them the first ``target`` by (time, client id). The round lasts until the ``target``-th
        report; else, when someone expected did not report and a deadline is set, the deadline; else until the
        last report (0 s when nobody reported)."""
        deadline = self.config.deadline
        workers = plan.clients[plan.works]
        on_time = seconds <= deadline if deadline is not None else np.ones(len(seconds), dtype=bool)
        order = sorted(np.flatnonzero(on_time).tolist(), key=lambda j: (seconds[j], workers[j]))
        keep = order[:target]
        reports = np.zeros(len(seconds), dtype=bool)
        reports[keep] = True
        if len(order) > target and target > 0:
            length = float(seconds[keep[-1]])
        elif deadline is not None and (bool(plan.dropped.any()) or not bool(on_time.all())):
            length = float(deadline)
        else:
            length = float(seconds[reports].max()) if reports.any() else 0.0
        return RoundClose(reports, int((~on_time).sum()), len(order) - len(keep), length)
