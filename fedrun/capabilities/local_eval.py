"""Personalised evaluation as a capability (``eval.local_test``, ``eval.finetune_*``, ``eval.unseen_clients``;
fedrun/metrics/personal.py, docs/personalised.md): each client's local test split is taken from its data before the
clients' data is built, unseen clients are partitioned beside the trained ones, and each evaluated round reports
every client's own model (``local_acc_*``, clients.csv) and the unseen clients' (``unseen_acc_*``)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fedrun.capabilities.base import Capability, DataSplit, RunView, StateView
from fedrun.config.registry import ALGORITHMS, CAPABILITIES
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors
from fedrun.data.local_test import LocalTest, Unseen, make_local_test
from fedrun.metrics.local_settings import AUTO, LocalEvalSettings
from fedrun.metrics.personal import LocalEvaluation, resume_clients_csv
from fedrun.storage.rundir import RunDir


@CAPABILITIES.register("local_eval")
class LocalEval(Capability):
    """Local test splits, fine-tuning before evaluation, unseen clients."""

    name: ClassVar[str] = "local_eval"
    section: ClassVar[str] = "eval"
    joins: ClassVar[bool] = True
    position: ClassVar[int] = 40
    Settings: ClassVar[type] = LocalEvalSettings

    @classmethod
    def active(cls, settings: LocalEvalSettings) -> bool:
        return settings.local_test != "none"

    @classmethod
    def words(cls, settings: LocalEvalSettings) -> str:
        if settings.local_test == "none":
            return ""
        ft = f", fine-tuned {settings.finetune_steps} steps" if settings.finetune_steps else ""
        unseen = f", {settings.unseen_clients} unseen" if settings.unseen_clients else ""
        return f"local test ({settings.local_test}{ft}{unseen})"

    @classmethod
    def resolve(cls, settings: LocalEvalSettings, spec: Any) -> LocalEvalSettings:
        """``auto``: a local test split for a method with a model per client (``personal``), else none."""
        try:
            return settings.resolved(bool(spec.algorithm.obj.personal))
        except ConfigError as e:
            raise ConfigError(f"eval.{e.field}", e.message) from None

    @classmethod
    def identity(cls, node: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any] | None:
        """Each key at its off value drops out of the ``eval`` section (added later: older runs keep their identity);
        ``auto`` counts as what it resolves to for the run's method, so ``none`` and an ``auto`` that means none are
        one run."""
        out = dict(node)
        if out.get("local_test", AUTO) == AUTO:
            name = (raw.get("algorithm") or {}).get("name")
            personal = name in ALGORITHMS.names() and bool(ALGORITHMS.get(name).obj.personal)
            out["local_test"] = "split" if personal else "none"
        off = {f.name: f.default for f in fields(LocalEvalSettings)} | {"local_test": "none"}
        return {k: v for k, v in out.items() if not (k in off and v == off[k])}

    @classmethod
    def extra_clients(cls, settings: LocalEvalSettings) -> int:
        return settings.unseen_clients

    @classmethod
    def split_data(cls, settings: LocalEvalSettings, spec: Any, split: DataSplit) -> None:
        """The clients' local test splits (``split``: of each one's data; ``partition``: of the test set) and the
        unseen clients (the last ``eval.unseen_clients`` parts, never trained)."""
        seed = spec.seed if settings.local_test_seed is None else settings.local_test_seed
        labels = (split.test if split.test is not None else split.data.test).y.cpu().numpy()
        train_parts, local = make_local_test(
            settings.local_test, settings.local_test_fraction, seed, split.train_parts,
            split.data.train.y.cpu().numpy(), labels, split.data.num_classes, spec.cache_dir,
        )  # fmt: skip
        n, unseen = spec.fl.clients, None
        if local is not None and len(split.parts) != n:
            unseen = Unseen(train_parts[n:], LocalTest(local.mode, local.parts[n:]))
            split.parts, train_parts, local = split.parts[:n], train_parts[:n], LocalTest(local.mode, local.parts[:n])
        split.train_parts = train_parts
        split.prepared[cls.name] = (local, unseen)

    @classmethod
    def stack_blocker(cls, settings: LocalEvalSettings) -> str | None:
        """It stacks: the local test splits are each run's data, the evaluation each run's own."""
        return None

    def __init__(self, settings: LocalEvalSettings, run: RunView) -> None:
        super().__init__(settings, run)
        self.local, self.unseen = run.prepared[self.name]
        self.evaluation: LocalEvaluation | None = None

    def start(self, run_dir: Path | None, start: int) -> None:
        """The evaluator of the clients' models; clients.csv cut back to round ``start``."""
        s, spec, run = self.settings, self.run.spec, self.run
        csv = RunDir(run_dir).clients_file if run_dir is not None else None
        if csv is not None:
            resume_clients_csv(csv, start)
        finetune = (s.finetune_steps, s.finetune_lr, spec.fl.batch_size, s.finetune_epochs, s.finetune_momentum)
        seed, batch = spec.seed, spec.eval.batch_size
        out = LocalEvaluation(run.model, run.fed, self.local, batch, finetune, seed, csv)
        if self.unseen is not None:
            unseen: Unseen = self.unseen
            out.unseen = LocalEvaluation(run.model, run.fed, unseen.local_test, batch, finetune, seed,
                                         train_parts=unseen.train_parts)  # fmt: skip
            out.unseen.first_id = spec.fl.clients
        self.evaluation = out

    def eval_columns(self, rnd: int, state: StateView, model: Tensors, lr: float) -> dict[str, float]:
        if self.evaluation is None:
            self.start(None, rnd)
        assert self.evaluation is not None
        return self.evaluation(self.run.algorithm, model, state.clients, rnd, lr)

    def summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The clients' own models on their local test splits in the last evaluated round: mean, weighted mean and
        worst-10% accuracy, beside the global model's mean there (``local_acc_*_final``)."""
        last = rows[-1] if rows else {}
        keys = ("local_acc_mean", "local_acc_wmean", "local_acc_worst10", "local_global_acc_mean", "unseen_acc_mean")
        return {f"{k}_final": float(last[k]) for k in keys if k in last}

    def lines(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        if "local_acc_mean_final" not in summary:
            return []

        def pct(k: str) -> str:
            return f"{100 * summary[k]:.2f}%" if k in summary else "-"

        own = f"{pct('local_acc_mean_final')} / {pct('local_acc_wmean_final')} / {pct('local_acc_worst10_final')}"
        out = [("personalised: mean / weighted / worst 10%", own)]
        out.append(("global model on the local tests (mean)", pct("local_global_acc_mean_final")))
        if "unseen_acc_mean_final" in summary:
            out.append(("unseen clients' accuracy (mean)", pct("unseen_acc_mean_final")))
        return out

    def brief(self, summary: dict[str, Any]) -> str:
        m = summary.get("local_acc_mean_final")
        return "" if m is None else f"personalised {100 * m:.2f}%"

    @property
    def test_parts(self) -> list[np.ndarray]:
        """The clients' local test splits (sample indices)."""
        assert self.local is not None
        parts: list[np.ndarray] = self.local.parts
        return parts
