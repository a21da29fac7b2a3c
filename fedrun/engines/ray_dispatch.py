"""The Ray engine's round dispatch: shards to actors, a lost actor's shards re-run on the survivors.

A round's cohort is cut into a fixed number of shards (``hardware.actors``, set when the engine starts), each a
list of whole chunks with its own seed ``(run seed, round, shard)``. Shard k goes to live actor k mod #live. An
actor whose process dies (SIGKILL, out of memory) or whose node leaves the cluster fails its pending calls with
``RayActorError``; those shards are sent again, round-robin, to the actors still alive, and the dead actor leaves
the pool for the rest of the run. A shard's result depends only on its inputs and its seed, never on which
actor computes it (every actor holds the same algorithm, data and chunk width), so a re-run gives the result the
lost actor would have given, bit for bit, and the run equals an uninterrupted one. When no actor is left the round
fails with :class:`ClusterLost` (one line): the run stops at its last checkpoint, from which
``fedrun resume=<run dir>`` continues once a cluster is back.

Placement (``hardware.placement``): ``default`` leaves the actors to Ray's scheduler (which fills the driver's
node first); ``pack``, ``spread`` and ``strict_spread`` reserve one bundle per actor in a placement group of
that strategy (PACK, SPREAD, STRICT_SPREAD: at most one actor per node, refused when the cluster has too few).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PLACEMENTS = ("default", "pack", "spread", "strict_spread")
PLACEMENT_WAIT_S = 60.0  # how long a placement group may take to be placed before the run is refused


class ClusterLost(RuntimeError):
    """Every actor of the Ray engine died before a round finished: the run fails in one line at its last
    checkpoint."""


def run_shards(ray: Any, actors: list[Any], submit: Callable[[Any, int], Any], shards: int, rnd: int) -> dict[str, Any]:
    """Every shard's result, each computed once by a live actor: ``{"results": [...] (shard order), "live": the
    actors still alive, "reruns": shards sent again}``.

    ``submit(actor, k)`` sends shard k to ``actor`` and returns its object ref. Shards of an actor that died are
    sent again to the survivors (see the module docstring); an error the training itself raised propagates.
    """
    live, results, todo, reruns = list(actors), {}, list(range(shards)), 0
    while todo:
        if not live:
            raise ClusterLost(
                f"all {len(actors)} Ray actors died in round {rnd + 1} (their processes or nodes were lost); "
                "the run stops at its last checkpoint: fedrun resume=<run dir> once the cluster is back"
            )
        sent = [(k, live[i % len(live)]) for i, k in enumerate(todo)]
        refs = [submit(actor, k) for k, actor in sent]
        dead: list[Any] = []
        todo = []
        for (k, actor), ref in zip(sent, refs, strict=True):
            try:
                results[k] = ray.get(ref)
            except ray.exceptions.RayActorError:
                todo.append(k)
                if all(actor is not d for d in dead):
                    dead.append(actor)
        for actor in dead:  # a call that found its actor unavailable: make sure it does not come back mid-run
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass
        live = [a for a in live if all(a is not d for d in dead)]
        reruns += len(todo)
    return {"results": [results[k] for k in range(shards)], "live": live, "reruns": reruns}


def placement_options(ray: Any, strategy: str, bundle: dict[str, float], n: int) -> tuple[Any, list[dict[str, Any]]]:
    """A placement group of ``n`` bundles (``bundle``: one actor's resources) with ``strategy`` (one of
    :data:`PLACEMENTS` but ``default``), once placed; and each actor's scheduling options. A group that cannot be
    placed within :data:`PLACEMENT_WAIT_S` is removed and refused in one line (a ``ValueError`` with the why)."""
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = placement_group([dict(bundle) for _ in range(n)], strategy=strategy.upper())
    if not pg.wait(timeout_seconds=PLACEMENT_WAIT_S):
        remove_placement_group(pg)
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        have = ray.cluster_resources()
        raise ValueError(
            f"{n} actors of {bundle} with placement {strategy} cannot be placed on this cluster ({nodes} node(s), "
            f"{have.get('CPU', 0):g} CPUs, {have.get('GPU', 0):g} GPUs) within {PLACEMENT_WAIT_S:g} s"
        )
    opts = [
        {"scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i)}
        for i in range(n)
    ]
    return pg, opts


def remove_placement(pg: Any) -> None:
    """Remove a placement group (the engine's, at close); one already gone is fine."""
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(pg)
    except Exception:  # noqa: BLE001, S110 - the cluster went away first
        pass
