"""How much timing ``engine=auto`` may do: at most :data:`BUDGET` of the run it chooses an engine for.

Both sides are counted before anything runs, in the one unit the probe and the run share: a local step of the
run's own model and batch size. The run is ``rounds x clients trained per round x (mean local steps +
CLIENT_STEPS)``; the probe is, on each candidate engine, a warm-up on 2 clients and ``PROBE_REPS`` rounds of up
to ``PROBE_CLIENTS`` clients of ``PROBE_STEPS`` steps each (plus :data:`CLIENT_STEPS` per client), and for an
engine other than the sequential one its first call (vmap's tracing, an actor's start): :data:`FIRST_CALL_STEPS`.
When the probe would cost more, ``auto`` does not time: it takes the sequential engine, which runs every method
and has no first-call cost, and says so in ``summary.json`` (``engine_selection``). A small run loses little by
it: the whole run is then under ten probes long.

The two constants were measured on a 2-core CPU (Fashion-MNIST's MLP 784-200-200-10, B = 50, one thread, load
average 6; ``fedrun.engines.auto.measure`` with its rounds timed): the sequential engine took 0.022 s for 2
clients of 2 steps and 0.082 s for 16 (2.6 ms a step, about one step more per client: :data:`CLIENT_STEPS`), and
the vectorised engine's first call 1.29 s, 500 steps (:data:`FIRST_CALL_STEPS`). For a CNN the same first call
was 80 steps of its slower step: the constant errs on the side of not timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedrun.config.schema import FLConfig
from fedrun.data.federated import num_local_steps

BUDGET = 0.10  # the probe's share of the run at most
PROBE_STEPS = 2  # local steps per client in the probe
PROBE_CLIENTS = 16  # at most this many clients: enough to show vmap's batching, cheap for a CNN on a CPU
PROBE_REPS = 2
WARM_UP_CLIENTS = 2
CLIENT_STEPS = 1.0  # a client's fixed cost in a round (its batch plan, its state in and out), in local steps
FIRST_CALL_STEPS = 500.0  # the first call of an engine other than the sequential one, in local steps
NO_FIRST_CALL = frozenset({"sequential"})


@dataclass(frozen=True)
class ProbeBudget:
    """The probe's and the run's costs, in local steps of the run's model."""

    probe_steps: float
    run_steps: float

    @property
    def fits(self) -> bool:
        return self.probe_steps <= BUDGET * self.run_steps

    @property
    def share(self) -> float:
        """The probe's cost as a fraction of the run's."""
        return self.probe_steps / self.run_steps if self.run_steps > 0 else float("inf")

    def record(self) -> dict[str, float]:
        """What ``summary.json``'s ``engine_selection`` keeps of it."""
        return {"probe_steps": round(self.probe_steps), "run_steps": round(self.run_steps), "budget": BUDGET}


def run_steps(fl: FLConfig, sizes: Sequence[int] | torch.Tensor) -> float:
    """The run's cost: its rounds x the clients trained per round x (their mean local steps + CLIENT_STEPS)."""
    counts = [int(n) for n in sizes]
    mean = sum(num_local_steps(n, fl) for n in counts) / max(len(counts), 1)
    trained = fl.clients if fl.train_all else fl.cohort_size
    return fl.rounds * trained * (mean + CLIENT_STEPS)


def probe_steps(engines: Sequence[str], width: int) -> float:
    """The probe's cost on ``engines`` for a cohort ``width`` clients wide (see the module docstring)."""
    clients = WARM_UP_CLIENTS + PROBE_REPS * min(width, PROBE_CLIENTS)
    per_engine = clients * (PROBE_STEPS + CLIENT_STEPS)
    return sum(per_engine + (0.0 if name in NO_FIRST_CALL else FIRST_CALL_STEPS) for name in engines)


def probe_budget(engines: Sequence[str], fl: FLConfig, sizes: Sequence[int] | torch.Tensor, width: int) -> ProbeBudget:
    return ProbeBudget(probe_steps(engines, width), run_steps(fl, sizes))


def unmeasured_engine(engines: Sequence[str]) -> str:
    """The engine a run too small to time gets: the sequential one where it is a candidate, else the first."""
    return "sequential" if "sequential" in engines else engines[0]
