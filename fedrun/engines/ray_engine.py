"""The Ray engine (``hardware.engine=ray``): a round's cohort split across Ray actors.

Each actor receives the algorithm, the federated data and the FL settings once, through Ray's object
store, and keeps its own single-process engine: the vectorised engine, or the sequential one for a
model ``vmap`` cannot run (see :func:`fedrun.engines.vectorised.vmap_blocker`). Every round the driver
puts w^t and the extras in the object store once, sends each actor its shard of the cohort with those
clients' states, and stitches the results back into cohort order. Actors live as long as the engine
(reused across rounds); :meth:`RayEngine.close` kills them and shuts down a cluster the engine started.

Per-round settings: the actors hold copies of the algorithm, so nothing the driver changes reaches them
unless it is sent. Each round's learning rate, w^t, extras and the global model's buffers (BatchNorm
statistics) travel with the round; the round's FL settings (IMA's ``ed`` lowers the local epochs) come
from :meth:`Algorithm.round_fl`, a pure function of the round that each actor is_eval_round as the driver does.

Exactness: the vectorised engine sorts the cohort by size (largest first) and cuts it into chunks of
``width`` clients. The Ray engine makes the same cut and hands out whole chunks (:func:`shard_chunks`),
so every chunk is computed by the same code on the same inputs as in one process: uploads, states,
steps, samples and the mean local loss equal, bit for bit on the CPU, those of
``VectorisedEngine(chunk=width)``. With ``hardware.chunk`` unset the width is the vectorised engine's
memory-based choice capped at ceil(cohort / actors), so that every actor gets work.

Failures and placement (:mod:`fedrun.engines.ray_dispatch`): the number of shards is fixed when the actors
start; a shard whose actor dies (its process, its node) is re-run on a surviving actor with the same seed, so
the round's result is unchanged; ``hardware.placement`` spreads or packs the actors over the nodes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch

from fedrun.algorithms.base import Algorithm
from fedrun.config.registry import ENGINES, positive
from fedrun.config.schema import FLConfig, HardwareConfig, engine_options
from fedrun.core.errors import ConfigError, DivergenceError
from fedrun.core.extras import has_module, require_extra
from fedrun.core.rng import derive
from fedrun.core.tree import Tensors, Tree, tree_map
from fedrun.data.federated import FederatedData
from fedrun.engines.base import CohortResult, Engine
from fedrun.engines.ray_dispatch import PLACEMENTS, placement_options, remove_placement, run_shards
from fedrun.engines.vectorised import VectorisedEngine, VectorisedParams, cohort_order_key, vmap_blocker


@dataclass
class RayParams(VectorisedParams):
    """The Ray engine's options (``hardware.*``): the vectorised engine's, which each actor runs, and these."""

    actors: int = 0  # actors sharing the cohort (0: one per GPU with cuda, else one per cluster CPU)
    address: str | None = None  # an existing cluster's address (ray.init(address=...)); null: start one
    placement: str = "default"  # default (Ray's scheduler) | pack | spread | strict_spread (a placement group)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("actors", self.actors, allow_zero=True)
        if self.placement not in PLACEMENTS:
            raise ConfigError("placement", f"invalid value {self.placement!r}; valid: {', '.join(PLACEMENTS)}")
        if self.address is not None and not self.address.strip():
            raise ConfigError("address", "must be a Ray address (auto, ray://host:port, host:port) or null")


def shard_chunks(sizes: list[int], width: int, actors: int) -> list[list[int]]:
    """Cohort positions per actor: whole chunks of the size-sorted cohort, balanced by samples.

    The cohort is sorted by size, largest first (stable, as the vectorised engine sorts it) and cut into
    chunks of ``width``; chunks go, largest first, to the actor with the fewest samples so far. Each
    actor's positions stay in sorted order, so its own engine re-forms exactly these chunks.
    """
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])  # Python's sort is stable
    chunks = [order[lo : lo + width] for lo in range(0, len(order), width)]
    load = [0] * actors
    owned: list[list[int]] = [[] for _ in range(actors)]
    for k, chunk in enumerate(chunks):
        a = min(range(actors), key=lambda j: (load[j], j))
        load[a] += sum(sizes[i] for i in chunk)
        owned[a].append(k)
    return [[i for k in ks for i in chunks[k]] for ks in owned if ks]


def split_contiguous(m: int, actors: int) -> list[list[int]]:
    """``m`` cohort positions in at most ``actors`` contiguous, near-equal parts (for sequential actors)."""
    n = min(actors, m)
    bounds = [i * m // n for i in range(n + 1)] if n else [0]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(n)]


def ray_module() -> Any:
    """``import ray``, or a one-line ConfigError naming its install (:func:`fedrun.core.extras.require_extra`)."""
    return require_extra("ray", "dist", "hardware.engine")


class ShardWorker:
    """One actor's state: its own single-process engine over the run's algorithm and data."""

    def __init__(
        self, pieces: tuple[Algorithm, FederatedData, FLConfig, int], inner: str, width: int, hw: dict[str, Any]
    ) -> None:
        algorithm, data, fl, seed = pieces
        if hw["threads"]:
            torch.set_num_threads(hw["threads"])
        self.precision = hw["precision"]
        self.device = data.device
        if inner == "vectorised":
            self.engine: Engine = VectorisedEngine(algorithm, data, fl, seed, chunk=width, compile=hw["compile"])
        else:
            self.engine = ENGINES.get("sequential").obj(algorithm, data, fl, seed)

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """The id of the Ray node this actor runs on (Ray's own placement record)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def train(
        self,
        rnd: int,
        params: Tensors,
        extras: Tree,
        clients: torch.Tensor,
        states: Tree,
        lr: float,
        seed: int,
        buffers: Tensors | None = None,
        budgets: torch.Tensor | None = None,
    ) -> CohortResult:
        from fedrun.engines.auto import precision_context  # auto imports this module's registry peers

        if buffers:  # the driver's global BatchNorm statistics of this round, which clients start from
            self.engine.algorithm.model.set_buffers(buffers)
        torch.manual_seed(seed)  # dropout & co: deterministic per (run seed, round, shard)
        with precision_context(self.precision, self.device):
            if budgets is None:
                return self.engine.train_cohort(rnd, params, extras, clients, states, lr)
            return self.engine.train_cohort(rnd, params, extras, clients, states, lr, budgets)


def _rows(tree: Tree, pos: torch.Tensor) -> Tree:
    return tree_map(lambda t: t.index_select(0, pos.to(t.device)), tree) if tree else {}


def round_traffic(broadcast: Any, states: Tree, positions: list[torch.Tensor], results: list[Any]) -> dict[str, int]:
    """The pickled bytes a round moves: ``broadcast`` (w^t, extras, buffers: put once, read by every actor),
    ``states_out`` (each shard's client states, to its actor only) and ``returned`` (the shards' results)."""
    import pickle

    def size(x: Any) -> int:
        return len(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))

    return {
        "broadcast": size(broadcast),
        "states_out": sum(size(_rows(states, pos)) for pos in positions),
        "returned": sum(size(r) for r in results),
    }


def _place(parts: list[Tree], positions: list[torch.Tensor], m: int) -> Tree:
    """Stacked shard trees back into one tree in cohort order."""
    if not parts or not parts[0]:
        return {}
    inverse = torch.empty(m, dtype=torch.long)
    inverse[torch.cat(positions)] = torch.arange(m)

    def join(*xs: torch.Tensor) -> torch.Tensor:
        cat = torch.cat(xs)
        return cat.index_select(0, inverse.to(cat.device))

    return tree_map(join, parts[0], *parts[1:])


@ENGINES.register("ray", RayParams)
class RayEngine(Engine):
    """Shards every cohort across Ray actors (see the module docstring); ``close()`` ends them.

    ``hw``: the ``hardware`` section (its threads and precision, and the Ray options, :class:`RayParams`); none:
    two local actors.
    """

    def __init__(
        self, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int, hw: HardwareConfig | None = None
    ) -> None:
        super().__init__(algorithm, data, fl, seed)
        self.hw = hw or HardwareConfig(engine="ray")
        self.options = engine_options(RayParams, hw) if hw is not None else RayParams(actors=2)
        self.ray = ray_module()
        self.inner = "sequential" if vmap_blocker(algorithm) else "vectorised"
        vec = self.inner == "vectorised"
        self._probe = VectorisedEngine(algorithm, data, fl, seed, chunk=self.options.chunk) if vec else None
        self.actors: list[Any] = []  # the live actors (one that died leaves the list)
        self.shards = 0  # shards per round: the actor count at start, kept when actors die (each keeps its seed)
        self.reruns = 0  # shards re-run on another actor after theirs died, over the run
        self.width: int | None = None
        self.traffic: dict[str, int] | None = None  # {}: record the pickled bytes each round moves (the bench)
        self._pg: Any = None
        self._owns_ray = False
        self._closed = False

    @classmethod
    def build(
        cls, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int, hw: HardwareConfig, options: Any
    ) -> RayEngine:
        return cls(algorithm, data, fl, seed, hw=hw)

    @classmethod
    def machine_blocker(cls, device: torch.device, hw: HardwareConfig, options: Any) -> str | None:
        """``engine=auto`` times Ray only on a cluster that is already up (``hardware.address``): starting a local
        one for a probe costs more than it can save on one machine."""
        if not has_module("ray"):
            return "ray is not installed (pip install 'fedrun[dist]')"
        if not options.address:
            return "no Ray cluster given (hardware.address)"
        return None

    # ---- cluster and actors ------------------------------------------------------------------------------------
    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return  # a cluster the caller (a Ray launcher job, a test) set up: theirs to shut down
        if self.options.address:
            ray.init(address=self.options.address, log_to_driver=False)
        else:
            cpus = max(os.cpu_count() or 1, (self.options.actors or 1) * max(self.hw.threads, 1))
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)  # never RAY_ADDRESS
        self._owns_ray = True

    def _resources(self) -> tuple[str, int, dict[str, Any]]:
        """What one actor reserves: (resource that bounds the actor count, amount, Ray actor options)."""
        if self.data.device.type == "cuda":
            return "GPU", 1, {"num_cpus": 1, "num_gpus": 1}
        cpus = max(self.hw.threads, 1)
        return "CPU", cpus, {"num_cpus": cpus}

    def n_actors(self) -> int:
        """``hardware.actors``, or as many as the cluster's GPUs (cuda) or CPUs hold."""
        key, per, _ = self._resources()
        if self.options.actors:
            return self.options.actors
        return max(int(self.ray.cluster_resources().get(key, per)) // per, 1)

    def _start(self, params: Tensors, states: Tree, m: int) -> None:
        """Connect, fix the chunk width and start the actors (once: they serve every round)."""
        if self._closed:
            raise RuntimeError("the Ray engine was closed")
        self._connect()
        ray, n = self.ray, self.n_actors()
        key, per, opts = self._resources()
        total = float(ray.cluster_resources().get(key, 0))
        if n * per > total:  # Ray would wait forever for actors that cannot be placed
            raise ConfigError(
                "hardware.actors",
                f"{n} actors x {per} {key} exceed the Ray cluster's {total:g} {key}s; lower hardware.actors"
                + (" or hardware.threads" if key == "CPU" else ""),
            )
        self.width = self.chunk_width(params, states, m, n)
        placed: list[dict[str, Any]] = [{}] * n
        if self.options.placement != "default":
            bundle = {key: float(per), **({"CPU": 1.0} if key == "GPU" else {})}
            try:
                self._pg, placed = placement_options(ray, self.options.placement, bundle, n)
            except ValueError as e:
                raise ConfigError("hardware.placement", str(e)) from None
        pieces = ray.put((self.algorithm, self.data, self.fl, self.seed))  # once: every actor reads this copy
        hw = {"threads": self.hw.threads or 1, "precision": self.hw.precision, "compile": self.options.compile}
        remote = ray.remote(ShardWorker)
        self.actors = [remote.options(**opts, **placed[i]).remote(pieces, self.inner, self.width, hw) for i in range(n)]
        self.shards = n

    def worker_pids(self) -> list[int]:
        """Process ids of the live actors (for checking that none outlive the engine)."""
        return list(self.ray.get([a.pid.remote() for a in self.actors])) if self.actors else []

    def actor_nodes(self) -> list[str]:
        """The Ray node id of each live actor, as the actor itself reads it from Ray's runtime context."""
        return list(self.ray.get([a.node.remote() for a in self.actors])) if self.actors else []

    def close(self) -> None:
        """Kill the actors; shut Ray down when this engine started or joined the cluster. Idempotent."""
        if self._closed:
            return
        self._closed = True
        ray = self.ray
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - an actor that died already
                pass
        self.actors = []
        if self._pg is not None:
            remove_placement(self._pg)
            self._pg = None
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    # ---- a round --------------------------------------------------------------------------------------------
    def chunk_width(self, params: Tensors, states: Tree, m: int, actors: int) -> int:
        """``hardware.chunk``, else the vectorised engine's memory-based width capped at ceil(m / actors)."""
        if self._probe is None:
            return 1  # sequential actors: no chunks
        if self.options.chunk is not None:
            return self.options.chunk
        return max(1, min(self._probe.chunk_width(params, states, m), math.ceil(m / actors)))

    def _seed(self, rnd: int, shard: int) -> int:
        return derive(self.seed, "ray", rnd, shard)

    def _positions(self, rnd: int, clients: torch.Tensor, budgets: torch.Tensor | None) -> list[torch.Tensor]:
        """Each actor's cohort positions: whole chunks of the vectorised engine's sort (sizes; with budgets the steps
        each client runs), so its engine forms the same chunks; contiguous parts for sequential actors."""
        if self.inner == "vectorised":
            key = cohort_order_key(self, rnd, clients, budgets)
            shards = shard_chunks(key.tolist(), self.width or 1, self.shards)
        else:
            shards = split_contiguous(len(clients), self.shards)
        return [torch.tensor(s, dtype=torch.long) for s in shards]

    def train_cohort(
        self,
        rnd: int,
        params: Tensors,
        extras: Tree,
        clients: torch.Tensor,
        states: Tree,
        lr: float,
        budgets: torch.Tensor | None = None,
    ) -> CohortResult:
        m = len(clients)
        if not self.actors:
            self._start(params, states, m)
        ray = self.ray
        positions = self._positions(rnd, clients, budgets)
        p_ref, e_ref = ray.put(params), ray.put(extras)  # once per round, read by every actor
        # the global model's buffers change every round on the driver (the runner or the method sets them);
        # the actors' copies of the model would otherwise keep the ones they were started with
        b_ref = ray.put(self.algorithm.model.buffers) if self.algorithm.model.buffers else None

        def submit(actor: Any, k: int) -> Any:  # shard k: only its clients' states travel, to its actor only
            pos = positions[k]
            budget = None if budgets is None else budgets.index_select(0, pos)
            return actor.train.remote(
                rnd, p_ref, e_ref, clients[pos], _rows(states, pos), lr, self._seed(rnd, k), b_ref, budget
            )

        try:
            done = run_shards(ray, self.actors, submit, len(positions), rnd)
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, (DivergenceError, ConfigError)):
                raise cause from None
            raise
        results: list[CohortResult] = done["results"]
        self.actors, self.reruns = done["live"], self.reruns + done["reruns"]
        if self.traffic is not None:
            self.traffic = round_traffic((params, extras, self.algorithm.model.buffers), states, positions, results)
        steps = _place([{"s": r.steps} for r in results], positions, m)["s"]
        n_steps = int(steps.sum())
        if all(r.client_loss is not None for r in results):
            loss_all = _place([{"l": r.client_loss} for r in results], positions, m)["l"]
            loss = float(loss_all.sum()) / max(n_steps, 1)
        else:  # sequential actors: the step-weighted mean of the shards' mean losses
            loss = sum(r.loss * float(r.steps.sum()) for r in results) / max(n_steps, 1)
            loss_all = None
        return CohortResult(
            uploads=_place([r.uploads for r in results], positions, m),
            states=_place([r.states for r in results], positions, m),
            steps=steps,
            samples=sum(r.samples for r in results),
            loss=loss,
            client_loss=loss_all,
        )
