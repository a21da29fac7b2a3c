"""The upload pipeline: the run's upload stages applied to the cohort's uploads between ``client_finish`` and
``aggregate`` (docs/compression.md).

Each float upload part (``params``, and a method's extra uploads such as SCAFFOLD's ``delta_c``; never the
BatchNorm ``buffers``, sent dense) is flattened to one float32 row per client: the model as w_i - w^t, an extra
that has a namesake among the broadcast extras as its difference from what was broadcast (FedFA's anchors), any
other extra as it is (it is already a difference or a gradient: SCAFFOLD's delta c_i, MimeLite's full-batch
gradient, FedSMOO's mu_i). The stages transform the rows in order (:attr:`UploadStage.order`); the server then
receives reference + row', in the upload's dtype and layout, so every method aggregates what was sent without
knowing it was compressed. An entry the stages left unchanged keeps the client's own value (no
(w - w^t) + w^t rounding), so a stage that changes nothing changes nothing.

Stateful stages keep their rows under the client-state key ``_upload`` (:data:`UPLOAD_STATE`), one float32 row
per (stage, part) and client, which the run gathers and scatters with the cohort and checkpoints with the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedrun.algorithms.base import Algorithm, ClientContext
from fedrun.core.tree import Tensors, Tree, leaves, nbytes
from fedrun.upload.base import RowStage, UploadContext, UploadStage

UPLOAD_STATE = "_upload"  # the client-state key of the stages' per-client rows


@dataclass(frozen=True)
class Part:
    """One upload part: its key in the uploads, its flat size d, and whether its reference is a broadcast extra."""

    key: str
    dim: int
    broadcast_ref: bool = False


def build_pipeline(stages: list[UploadStage]) -> UploadPipeline | None:
    """The run's upload stages (those its capabilities hand it) in their order; None when there are none, so a run
    without them takes the code path of before the pipeline."""
    return UploadPipeline(sorted(stages, key=lambda s: s.order)) if stages else None


def upload_layout(algorithm: Algorithm, params: Tensors, server_state: Tree) -> list[Part]:
    """The float upload parts of ``algorithm`` (all but ``buffers``), from one ``client_finish`` on w^0."""
    extras = algorithm.broadcast(params, server_state)
    ctx = ClientContext(params, extras, algorithm.client_init(params), 1.0, torch.tensor(1.0))
    upload, _ = algorithm.client_finish(params, params, ctx, torch.tensor(1))
    parts = []
    for key, value in upload.items():
        tree = value if isinstance(value, dict) else {key: value}
        dim = sum(t.numel() for t in leaves(tree) if t.is_floating_point())
        if key != "buffers" and dim:
            ref = key != "params" and key in extras and _same_shapes(extras[key], value)
            parts.append(Part(key, dim, ref))
    return parts


def _same_shapes(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_shapes(a[k], b[k]) for k in a)
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape


class UploadPipeline:
    """The run's upload stages in order; :meth:`bind` fixes the method's upload parts before the first round."""

    def __init__(self, stages: list[UploadStage]) -> None:
        self.stages = stages
        self.parts: list[Part] = []

    @property
    def stateful(self) -> bool:
        return any(s.stateful for s in self.stages)

    def bind(self, parts: list[Part]) -> None:
        """Use the method's upload ``parts``, each checked by every stage (a ConfigError names a bad setting)."""
        for part in parts:
            for stage in self.stages:
                stage.check(part.dim, part.key)
        self.parts = parts

    def state_template(self) -> Tree:
        """One client's rows of the stateful stages: ``{UPLOAD_STATE: {stage: {part: row}}}`` ({} when none)."""
        rows = {
            s.name: {p.key: s.init_state(p.dim) for p in self.parts} for s in self.stages if s.stateful
        }  # fmt: skip
        return {UPLOAD_STATE: rows} if rows else {}

    def bytes_per_client(self, uploads: Tree) -> int:
        """What one client sends: each compressed part at its last compressing stage's bits (rounded up to whole
        bytes), the rest (buffers, a dense part) at its size; ``uploads`` stacked over the cohort."""
        m = _cohort(uploads)
        total = 0
        for key, value in uploads.items():
            part = next((p for p in self.parts if p.key == key), None)
            bits = [b for s in self.stages if part and (b := s.bits_per_client(part.dim)) is not None]
            total += math.ceil(bits[-1] / 8) if bits else nbytes(value) // max(m, 1)
        return total

    def apply(
        self, params: Tensors, extras: Tree, uploads: Tree, rows: Tree | None, ctx: UploadContext
    ) -> tuple[Tree, Tree | None, dict[str, float]]:
        """The uploads the server receives, the stages' new rows (None when none are stateful) and diagnostics."""
        out, new_rows, diag = dict(uploads), {s: dict(r) for s, r in (rows or {}).items()}, {}
        for part in self.parts:
            pctx = UploadContext(ctx.rnd, ctx.clients, ctx.seed, ctx.weights, ctx.device, part.key)
            ref = params if part.key == "params" else extras[part.key] if part.broadcast_ref else None
            delta = _flat(uploads[part.key], ref)
            sent, stage_rows, d = self.transform(delta, rows, pctx)
            for name, row in stage_rows.items():
                new_rows[name][part.key] = row
            if sent.rows is delta:  # only a row stage's rows changed (or none): only their uploads are rebuilt
                out[part.key] = _rebuild_rows(uploads[part.key], ref, sent, delta)
            else:
                out[part.key] = _rebuild(uploads[part.key], ref, sent.full(), delta)
            diag.update(d if part.key == "params" else {f"{part.key}_{k}": v for k, v in d.items()})
        return out, (new_rows or None), diag

    def run_stages(
        self, delta: torch.Tensor, rows: Tree | None, ctx: UploadContext
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, float]]:
        """(delta [m, d] through every stage, then a stage's own aggregate in place of the weighted sum (a robust rule),
        then the stages' hook on the weighted sum; the new rows by stage; diagnostics). A changed sum sum_i p_i delta_i
        is spread back over the rows as delta_i + (total' - total), which the weighted mean (sum_i p_i = 1) turns into
        total'."""
        sent, new_rows, diag = self.transform(delta, rows, ctx)
        return sent.full(), new_rows, diag

    def transform(
        self, delta: torch.Tensor, rows: Tree | None, ctx: UploadContext
    ) -> tuple[Patched, dict[str, torch.Tensor], dict[str, float]]:
        """:meth:`run_stages` with its matrix as :class:`Patched`: a row stage's rows are kept apart from the
        matrix until a later stage or a sum reads the whole of it."""
        sent, new_rows, diag = Patched(delta), {}, {}
        for stage in self.stages:
            if isinstance(stage, RowStage):
                whole = sent.full()
                patch, d = stage.replace_rows(whole, ctx)
                sent = Patched(whole) if patch is None else Patched(whole, *patch)
            else:
                state = rows[stage.name][ctx.part] if stage.stateful and rows else None
                whole, state, d = stage.apply(sent.full(), state, ctx)
                sent = Patched(whole)
                if stage.stateful and state is not None:
                    new_rows[stage.name] = state
            diag.update(d)
        summed = [s for s in self.stages if type(s).apply_sum is not UploadStage.apply_sum]
        replaced = [s for s in self.stages if type(s).replace_sum is not UploadStage.replace_sum]
        if not summed and not replaced:
            return sent, new_rows, diag
        return Patched(self.spread(sent.full(), summed, replaced, ctx, diag)), new_rows, diag

    @staticmethod
    def spread(
        sent: torch.Tensor,
        summed: list[UploadStage],
        replaced: list[UploadStage],
        ctx: UploadContext,
        diag: dict[str, float],
    ) -> torch.Tensor:
        """The rows shifted so that their weighted mean is the stages' aggregate (``replaced``), then their hook on
        the sum (``summed``); ``diag`` gets their columns."""
        w = ctx.weights.to(sent.device, torch.float64).unsqueeze(1)
        total = weighted_sum(w.squeeze(1), sent)
        for stage in replaced:  # (a robust aggregate: the weighted mean of the spread rows is it)
            got = stage.replace_sum(sent, ctx)
            if got is not None:
                new_total, d = got
                diag.update(d)
                sent, total = sent + (new_total.to(sent) - total), new_total.to(sent)
        for stage in summed:
            new_total, d = stage.apply_sum(total, ctx)
            diag.update(d)
            if new_total is not total:
                sent, total = sent + (new_total - total), new_total
        return sent


@dataclass(frozen=True)
class Patched:
    """The stages' matrix: ``rows`` [m, d] with its rows ``at`` [a] replaced by ``patch`` [a, d] (a row stage's:
    none when ``at`` is None)."""

    rows: torch.Tensor
    at: torch.Tensor | None = None
    patch: torch.Tensor | None = None

    def full(self) -> torch.Tensor:
        """The whole matrix (``rows`` itself when nothing is patched)."""
        return self.rows if self.at is None else self.rows.index_copy(0, self.at, self.patch)  # type: ignore[arg-type]


SUM_CHUNK = 16384  # columns per float64 product of weighted_sum: a float64 copy of 16k columns, not of all d


def weighted_sum(weights: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """sum_i p_i rows_i [d] in ``rows``' dtype, accumulated in float64 (``weights`` [m] float64) by chunks of
    columns, so no float64 copy of the whole [m, d] matrix is made: 4x faster than one float64 product and sum of
    the whole on a 100 x 200k cohort (CPU, one thread), and bit for bit its numbers. Not a matrix product, which is
    faster still but rounds otherwise (at uniform weights 1/m, tested): DP-FedAvg's release, which adds its noise to
    this sum, would then differ from earlier runs in the last bit."""
    w = weights.to(rows.device, torch.float64).unsqueeze(1)
    out = torch.empty(rows.shape[1], dtype=rows.dtype, device=rows.device)
    for at in range(0, rows.shape[1], SUM_CHUNK):  # chunks of columns, each a float64 product summed down the rows
        out[at : at + SUM_CHUNK] = (w * rows[:, at : at + SUM_CHUNK].double()).sum(0).to(rows.dtype)
    return out


def _cohort(uploads: Tree) -> int:
    return next((t.shape[0] for t in leaves(uploads) if t.dim()), 0)


def _as_tree(value: Any, key: str = "_") -> Tree:
    return value if isinstance(value, dict) else {key: value}


def _flat(upload: Any, ref: Any) -> torch.Tensor:
    """The cohort's rows [m, d] (float32) of an upload part less its reference (None: zero)."""
    tree = _as_tree(upload)
    refs = _as_tree(ref) if ref is not None else None
    items = _float_items(tree)
    sizes = [t[0].numel() if t.dim() else 1 for _, t in items]
    m = items[0][1].shape[0]
    out = torch.empty(m, sum(sizes), dtype=torch.float32, device=items[0][1].device)
    at = 0
    for (k, t), n in zip(items, sizes, strict=True):  # each entry written into its columns: no copy to concatenate
        r = _lookup(refs, k)
        cols = out[:, at : at + n].view(t.shape)
        if r is None:
            cols.copy_(t)
        else:
            torch.sub(t.float(), r.float().unsqueeze(0), out=cols)
        at += n
    return out


def _rebuild(upload: Any, ref: Any, sent: torch.Tensor, delta: torch.Tensor) -> Any:
    """``upload`` with its float entries replaced by reference + ``sent`` (entries ``sent`` left equal to the
    client's ``delta``, :func:`_flat`'s rows, keep the client's own value), in each entry's dtype."""
    tree = _as_tree(upload)
    refs = _as_tree(ref) if ref is not None else None
    values: dict[tuple[str, ...], torch.Tensor] = {}
    at = 0
    for k, t in _float_items(tree):
        n = t[0].numel() if t.dim() else 1
        r = _lookup(refs, k)
        new = sent[:, at : at + n]
        values[k] = _entry(new.reshape(t.shape), delta[:, at : at + n].reshape(t.shape), t, r)
        at += n
    out = _replace(tree, values, ())
    return out if isinstance(upload, dict) else out["_"]


def _rebuild_rows(upload: Any, ref: Any, sent: Patched, delta: torch.Tensor) -> Any:
    """:func:`_rebuild` of ``delta`` with only the rows ``sent.at`` replaced: ``upload`` itself when none are,
    else each float entry a copy of the client's own with those rows rebuilt (the others are equal to ``delta``,
    so :func:`_rebuild` keeps the client's own value there too), the same numbers without an [m, d] comparison."""
    if sent.at is None or sent.patch is None:
        return upload
    at, tree = sent.at.to(delta.device), _as_tree(upload)
    refs = _as_tree(ref) if ref is not None else None
    old = delta.index_select(0, at)
    values: dict[tuple[str, ...], torch.Tensor] = {}
    col = 0
    for k, t in _float_items(tree):
        n = t[0].numel() if t.dim() else 1
        r, shape = _lookup(refs, k), (at.shape[0], *t.shape[1:])
        new = sent.patch[:, col : col + n]
        rebuilt = _entry(new.reshape(shape), old[:, col : col + n].reshape(shape), t.index_select(0, at), r)
        values[k] = t.index_copy(0, at, rebuilt)
        col += n
    out = _replace(tree, values, ())
    return out if isinstance(upload, dict) else out["_"]


NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)  # the float dtypes numpy shares with torch


def _entry(new: torch.Tensor, old: torch.Tensor, own: torch.Tensor, ref: torch.Tensor | None) -> torch.Tensor:
    """One rebuilt upload entry: ``torch.where(new == old, own, new + ref)`` in ``own``'s dtype, i.e. the client's
    own value where the stages left its row ``old`` as it was (``new``, ``old``: float32 rows in ``own``'s shape;
    ``ref`` [*shape[1:]] or None: zero). On the CPU the comparison and the choice run in numpy, into the fresh
    ``new + ref``: the same values, 2x faster than torch's ``==`` and ``where`` on 100 x 200k (one thread)."""
    full = (new + ref.float().unsqueeze(0)).to(own.dtype) if ref is not None else new.to(own.dtype, copy=True)
    if full.device.type != "cpu" or own.dtype not in NUMPY_FLOATS or full.requires_grad or own.requires_grad:
        return torch.where(new == old, own, full)
    np.copyto(full.numpy(), own.numpy(), where=np.equal(new.numpy(), old.numpy()))
    return full


def _float_items(tree: Tree, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], torch.Tensor]]:
    out = []
    for k, v in tree.items():
        if isinstance(v, dict):
            out.extend(_float_items(v, (*prefix, k)))
        elif v.is_floating_point():
            out.append(((*prefix, k), v))
    return out


def _lookup(tree: Tree | None, path: tuple[str, ...]) -> torch.Tensor | None:
    for k in path:
        if tree is None:
            return None
        tree = tree.get(k)
    return tree  # type: ignore[return-value]


def _replace(tree: Tree, values: dict[tuple[str, ...], torch.Tensor], prefix: tuple[str, ...]) -> Tree:
    return {
        k: _replace(v, values, (*prefix, k)) if isinstance(v, dict) else values.get((*prefix, k), v)
        for k, v in tree.items()
    }
