"""Poisoning attacks as a capability (``attack.*``; fedrun/robust/, docs/robustness.md).

``attack.name`` names a registered attack (fedrun/robust/attacks/); ``attack.fraction`` of all clients are malicious,
a fixed set drawn from the seed (:func:`~fedrun.robust.malicious.malicious_clients`, listed in summary.json). A
data attack (label flipping, the backdoor) poisons their training samples once, before the clients' data is built
(``client_data``); a model attack replaces their uploads each round they report, as an upload stage of order 50
(before compression and DP), knowing its own update or the round's honest ones (``attack.knowledge``). A backdoor
adds the attack success rate ``asr`` to each evaluated round: the global model's accuracy on the triggered test
inputs whose true class is not the target, labelled with the target.

``attack.start_round``..``attack.end_round`` (a window; by default every round) are the rounds they attack in:
outside it the attackers train on their clean samples (the poisoned ones are read in the window's rounds only:
:meth:`~fedrun.data.federated.FederatedData.set_swap`) and upload what they trained; the set of attackers, and the
``asr`` of every evaluated round, stay.
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from typing import Any, ClassVar

import numpy as np
import torch

from fedrun.capabilities.base import Capability, RunView, StateView
from fedrun.config.registry import CAPABILITIES, DATASETS
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors
from fedrun.metrics.evaluate import evaluate
from fedrun.robust.attacks.backdoor import Backdoor
from fedrun.robust.attacks.scaling import Scaling, ScalingParams
from fedrun.robust.base import ATTACKS, DataAttack, ModelAttack
from fedrun.robust.base import Attack as AttackRule
from fedrun.robust.malicious import malicious_clients
from fedrun.robust.poison import poison_clients, poisoned_rows, triggered_test
from fedrun.robust.settings import FIRST_ROUND, NONE, AttackSettings, check_unused_keys
from fedrun.robust.stages import AttackStage
from fedrun.upload.base import UploadStage


def build_attack(settings: Any) -> AttackRule:
    """The chosen attack with its settings read from the section (its params dataclass's keys)."""
    entry = ATTACKS.get(settings.name)
    hp = entry.params(**{f.name: getattr(settings, f.name) for f in fields(entry.params)}) if entry.params else None
    out: AttackRule = entry.obj(hp)
    return out


def replaces_model(attack: AttackRule) -> bool:
    """Whether the attack changes the uploads: a model attack, or a backdoor with model replacement."""
    return isinstance(attack, ModelAttack) or bool(getattr(attack.hp, "replace", False))


@CAPABILITIES.register("attack")
class Attack(Capability):
    """A fixed set of malicious clients, and what they do: poison their data or their uploads."""

    name: ClassVar[str] = "attack"
    section: ClassVar[str] = "attack"
    position: ClassVar[int] = 50
    Settings: ClassVar[type] = AttackSettings

    @classmethod
    def active(cls, settings: AttackSettings) -> bool:
        return settings.on

    @classmethod
    def choices(cls) -> dict[str, list[str]]:
        return {"name": [NONE, *ATTACKS.names()]}

    @classmethod
    def contributors(cls) -> list[tuple[str, type | None]]:
        return [(n, ATTACKS.get(n).params) for n in ATTACKS.names()]

    @classmethod
    def check(cls, settings: AttackSettings, spec: Any) -> None:
        """Refuse keys of an attack not chosen, a knowledge the attack has no choice of, a fraction that rounds to no
        client, and a setting the dataset cannot take (a backdoor's target outside the classes, a trigger on data
        that is not images), each in one line naming the key."""
        check_unused_keys(settings, (settings.name,), cls.contributors(), cls.section)
        check_window(settings, spec)
        if not settings.on:
            return
        entry = ATTACKS.get(settings.name)
        if getattr(settings, "knowledge", None) is not None and not ModelAttack.has_choice(entry.params):
            raise ConfigError("attack.knowledge", f"{settings.name} has no choice of knowledge; valid: leave it unset")
        n = spec.fl.clients
        if settings.fraction and round(settings.fraction * n) == 0:
            raise ConfigError(
                "attack.fraction",
                f"{settings.fraction:g} of fl.clients={n} rounds to no malicious client; valid: 0, or > {0.5 / n:.3g}",
            )
        attack = build_attack(settings)
        signature = DATASETS.get(spec.data.name).signature
        if isinstance(attack, DataAttack) and signature is not None:
            data = signature(spec.data.params)
            if isinstance(attack, Backdoor) and data.inputs != "images":
                raise ConfigError("attack.name", f"backdoor stamps a pixel trigger: {spec.data.name} has no images")
            attack.check(data.num_classes, data.input_shape)

    @classmethod
    def stack_blocker(cls, settings: AttackSettings) -> str | None:
        """It stacks: the malicious set and the poisoned samples are each run's (drawn from its seed before its data is
        built), a model attack an upload stage on its own run's uploads after the client step, keyed by its seed."""
        return None

    @classmethod
    def transforms_uploads(cls, settings: AttackSettings) -> str | None:
        return "attack.name" if settings.on and replaces_model(build_attack(settings)) else None

    @classmethod
    def words(cls, settings: AttackSettings) -> str:
        if not settings.on:
            return ""
        window = f", {window_words(settings)}" if settings.windowed else ""
        return f"{settings.name} attack ({settings.fraction:.0%} malicious{window})"

    @classmethod
    def tag(cls, settings: AttackSettings) -> str:
        if not settings.on:
            return ""
        window = f"-r{settings.start_round}-{settings.end_round or ''}" if settings.windowed else ""
        return f"{settings.name}{settings.fraction:g}{window}"

    @classmethod
    def identity(cls, node: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any] | None:
        """No attack at the section's defaults drops out: the runs of before the section existed keep their
        identity (``attack.fraction`` counts: a defence's f derives from it); so does a window at its default (every
        round: the attacks of before it existed)."""
        defaults = {f.name: f.default for f in fields(AttackSettings)}
        defaults.update({f.name: f.default for _, p in cls.contributors() if p is not None for f in fields(p)})
        if all(node.get(k, v) == v for k, v in defaults.items()):
            return None
        return {k: v for k, v in node.items() if k not in WINDOW or v != defaults[k]}

    @classmethod
    def client_data(cls, settings: AttackSettings, spec: Any, data: Any, parts: list[np.ndarray]) -> Any:
        """The malicious clients' training samples poisoned by a data attack (the test split stays clean); in a window
        of rounds the samples stay clean, the attackers reading their poisoned ones in its rounds (:meth:`__init__`)."""
        if not settings.on or settings.windowed:
            return data
        attack = build_attack(settings)
        if not isinstance(attack, DataAttack):
            return data
        attack.check(data.num_classes, tuple(data.input_shape))
        bad = malicious_clients(spec.seed, spec.fl.clients, settings.fraction)
        return poison_clients(data, parts, bad, attack, spec.seed)

    def __init__(self, settings: AttackSettings, run: RunView) -> None:
        super().__init__(settings, run)
        spec = run.spec
        self.attack = build_attack(settings)
        self.malicious = malicious_clients(spec.seed, spec.fl.clients, settings.fraction)
        self.triggered = triggered_test(run.fed.test, self.attack) if isinstance(self.attack, Backdoor) else None
        self.window = (settings.start_round - FIRST_ROUND, None if settings.end_round is None else
                       settings.end_round - FIRST_ROUND)  # fmt: skip
        if settings.windowed and isinstance(self.attack, DataAttack):
            self.attack.check(run.fed.data.num_classes, tuple(run.fed.data.input_shape))
            poisoned = poisoned_rows(run.fed.data, run.parts, self.malicious, self.attack, spec.seed)
            if poisoned is not None:
                run.fed.set_swap(poisoned[1], poisoned[0], *self.window)

    def upload_stages(self) -> list[UploadStage]:
        bad = torch.as_tensor(self.malicious, dtype=torch.long)
        server_lr = float(getattr(self.run.spec.algorithm.params, "server_lr", 1.0))
        if isinstance(self.attack, ModelAttack):
            return [AttackStage(self.attack, bad, server_lr, self.window)]
        if replaces_model(self.attack):  # a backdoor's model replacement: its upload scaled as eq. (3)
            scaling = Scaling(ScalingParams(getattr(self.attack.hp, "gamma", None)))
            return [AttackStage(scaling, bad, server_lr, self.window)]
        return []

    def eval_columns(self, rnd: int, state: StateView, model: Tensors, lr: float) -> dict[str, float]:
        """A backdoor's attack success rate ``asr``: the model's accuracy on the triggered test inputs."""
        if self.triggered is None:
            return {}
        acc, _ = evaluate(self.run.model, model, self.run.fed, self.triggered, self.run.spec.eval.batch_size)
        return {"asr": acc}

    def describe(self) -> dict[str, Any]:
        """summary.json's ``attack``: the attack, its settings, what it knows, and the malicious clients."""
        out: dict[str, Any] = {"name": self.settings.name, "fraction": self.settings.fraction}
        if self.attack.hp is not None:
            out["params"] = asdict(self.attack.hp)
        if isinstance(self.attack, ModelAttack):
            out["knowledge"] = self.attack.knowledge
        if self.settings.windowed:
            out["rounds"] = [self.settings.start_round, self.settings.end_round]
        return {"attack": {**out, "malicious_clients": self.malicious.tolist()}}

    def summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """A backdoor's attack success rate at the last evaluated round and its mean over the last k (``asr_*``)."""
        asr = [float(r["asr"]) for r in rows if "asr" in r and not math.isnan(float(r["asr"]))]
        if not asr:
            return {}
        k = self.run.spec.eval.last_k
        return {"asr_final": asr[-1], "asr_last_k": float(np.mean(asr[-k:])), "asr_best": max(asr)}

    def lines(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        out = [("attack", f"{self.words(self.settings)}: {len(self.malicious)} of {self.run.spec.fl.clients} clients")]
        if "asr_final" in summary:
            out.append(("attack success rate", f"{100 * summary['asr_final']:.2f}% (last round)"))
        return out

    def brief(self, summary: dict[str, Any]) -> str:
        return f"ASR {100 * summary['asr_final']:.2f}%" if "asr_final" in summary else ""


WINDOW = ("start_round", "end_round")  # attack.*: the rounds they attack in


def window_words(settings: AttackSettings) -> str:
    """The attack's rounds in words: "rounds 5-5", "from round 5"."""
    if settings.end_round is None:
        return f"from round {settings.start_round}"
    return f"rounds {settings.start_round}-{settings.end_round}"


def check_window(settings: AttackSettings, spec: Any) -> None:
    """Refuse a window of rounds without an attack, one that starts after the run's last round (no round would be
    attacked), and one under an asynchronous server (whose steps are server updates, its training not in rounds)."""
    if not settings.windowed:
        return
    key = "attack.start_round" if settings.start_round != FIRST_ROUND else "attack.end_round"
    if not settings.on:
        raise ConfigError(key, "sets the rounds an attack runs in, and attack.name is none; valid: leave it unset")
    rounds = spec.fl.rounds
    if settings.start_round > rounds:
        raise ConfigError(
            "attack.start_round",
            f"{settings.start_round} is after the run's last round (fl.rounds={rounds}), so no round would be"
            f" attacked; valid: {FIRST_ROUND}..{rounds}",
        )
    system = spec.sections.get("system")
    if system is not None and system.asynchronous:
        raise ConfigError(
            key, f"not with system.server={system.server}: its steps are server updates, not rounds; valid: leave it"
            f" unset, or system.server=sync",
        )  # fmt: skip
