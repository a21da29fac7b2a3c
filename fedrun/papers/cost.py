"""What a full reproduce target costs on this machine's CPU (``fedrun-reproduce list``).

Cost = client-samples of the sweep (rounds x cohort x local samples, per preset and method) x the model's wall
seconds per client-sample, plus a fixed cost per run and per ``fedrun -m`` invocation. A model's rate is *measured*
where a full-length run of it was timed (:data:`SEC_PER_SAMPLE`); otherwise it is *estimated*: its training rate
from a few steps at its preset's batch size (:data:`STEP_SEC_PER_SAMPLE`, ``python -m fedrun.papers.cost``
measures them) times the ratio of full-run rate to step rate of the measured models (:data:`CALIBRATION`, which
adds the per-round evaluation and the rest of a round). Neither bound: the list marks estimated rates with '~'.
Earlier versions priced every unmeasured model at the LSTM's rate, the slowest, and called it a lower bound; it
was an upper one (FedLAW LeNet: 38 h a run by that rate, about 2.7 h observed).
"""

from __future__ import annotations

import copy
import functools
import sys
import time
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from fedrun.config import location as conf_location
from fedrun.config.schema import store_schemas
from fedrun.papers.targets import TARGETS, Target

CONF_DIR = str(conf_location.CONF_DIR)
# training-set sizes used for the cost estimate (approximate where marked)
TRAIN_SIZE = {
    "fmnist": 60000,
    "mnist": 60000,
    "cifar10": 50000,
    "cifar100": 50000,
    "emnist": 139586,
    "digit5": 125000,
    "pacs": 8000,
    "shakespeare": 395060,
    "synthetic": 20101,
}  # digit5/pacs: rough; shakespeare: FedCos Table V's 143 roles (data.roles=143, split=random); synthetic: FedProx
# Fig. 1's data (data.variant=code data.seed=0: 30 devices, 22,349 samples, 20,101 train)
# Full-length runs, measured on this machine's CPU (2 shared cores, nice 19): wall seconds per client-sample
# (training + per-round evaluation).
# mlp: FedLAW Table 3 FMNIST-MLP FedAvg seed 8, 774 s wall for 36.0M client-samples (vectorised engine, chunk 20)
# ima_cnn: FedIMA Table I FMNIST-CNN shards FedAvg, the full 300 rounds (sequential engine, 1 thread, two runs at
# once on the 2 cores): 3,440 s wall for 9.0M client-samples (the earlier 1.17e-3 came from 3 rounds under load)
# fedcos_mlp: FedCos Table II FedAvg, round 3 (the fastest of 3 at full size): 19.7 s for 358,400 client-samples
# lstm: FedCos Table V FedAvg at full size, 1 thread, sequential engine, CPU seconds of a round (load average 12, so
# process time, not wall): 35.1 s at 10% (7,000 client-samples; 8.1 s training, 27.0 s evaluating 98,839 windows in
# 128-row chunks) and 44.1 s at 20% (14,000; 16.8 + 27.4): 3.8e-3 s per client-sample over the sweep. The
# evaluation does not grow with the cohort: a 10% run costs ~33% more than this, a 20% run ~16% less.
SEC_PER_SAMPLE = {"mlp": 2.15e-5, "fedcos_mlp": 5.5e-5, "ima_cnn": 3.8e-4, "lstm": 3.8e-3}
# Training steps alone (forward, backward, SGD update) at the model's preset batch size on random inputs of its
# dataset's shape, one torch thread, nice -n 10 (``python -m fedrun.papers.cost``, issue 38):
# CPU seconds per sample (measured on the first preset that runs the model; load average ~8 on 2 cores).
STEP_SEC_PER_SAMPLE = {
    "mlp": 1.61e-05,
    "fedcos_mlp": 1.61e-05,
    "fedcos_cnn": 1.56e-04,
    "lenet": 3.04e-04,
    "ima_cnn": 5.26e-04,
    # issue 50: 1.15e-3 beside ima_cnn's 6.5e-4 (load ~9.8), 5.4e-4 beside its 2.9e-4 (load ~3.8): at the ratio to
    # ima_cnn's rate above, 9.5e-4
    "pfllib_cnn": 9.5e-04,
    "simplecnn": 6.14e-04,
    "alexnet_cifar": 8.22e-04,
    "cnn": 1.01e-03,
    "lstm": 1.14e-03,
    "emnist_cnn": 1.26e-03,
    "resnet8": 1.53e-03,
    "digit5_cnn": 2.21e-03,
    "resnet20": 4.48e-03,
    "vgg11": 1.02e-02,
    "resnet56": 1.36e-02,
    "resnet110": 2.73e-02,
    "resnet18": 3.70e-02,
    "alexnet": 4.46e-02,
    "densenet121": 1.11e-01,
    "wrn56_4": 1.42e-01,
}
RUN_OVERHEAD_S = 2.0
INVOCATION_OVERHEAD_S = 15.0


def calibration() -> float:
    """Full-run rate / step rate, the mean over the models with both (the share of a round that is not steps)."""
    both = [SEC_PER_SAMPLE[m] / STEP_SEC_PER_SAMPLE[m] for m in SEC_PER_SAMPLE if m in STEP_SEC_PER_SAMPLE]
    return sum(both) / len(both) if both else 1.0


def rate(model: str) -> tuple[float, bool]:
    """(wall seconds per client-sample, measured at full length): estimated from the step rate when not measured
    (no step rate either: the slowest step rate known, and still an estimate)."""
    if model in SEC_PER_SAMPLE:
        return SEC_PER_SAMPLE[model], True
    step = STEP_SEC_PER_SAMPLE.get(model, max(STEP_SEC_PER_SAMPLE.values(), default=max(SEC_PER_SAMPLE.values())))
    return step * calibration(), False


def preset_cfg(preset: str, *overrides: str) -> dict[str, Any]:
    """The composed (unvalidated) config of a preset, as a plain dict (a fresh copy; composed once)."""
    return copy.deepcopy(_preset_cfg(preset, overrides))


@functools.cache
def _preset_cfg(preset: str, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    GlobalHydra.instance().clear()
    store_schemas()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=[f"experiment={preset}", *overrides])
    GlobalHydra.instance().clear()
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def preset_samples(target: Target, preset: str) -> float:
    """Client samples trained by the target's runs of one preset, from its rounds, cohort and local work."""
    cfg = preset_cfg(preset)
    fl = cfg["fl"]
    n = TRAIN_SIZE.get(cfg["data"]["name"], 50000)
    per_client = (
        fl["local_steps"] * fl["batch_size"] if fl.get("local_steps") else fl["local_epochs"] * n / fl["clients"]
    )
    runs = target.runs() / len(target.presets)
    # a swept participation (FedCos Tables IV, V: 10% and 20%) counts each value's cohort, not the preset's alone
    rates = [float(r) for r in dict(target.sweep).get("fl.participation", str(fl["participation"])).split(",")]
    cohort = sum(max(int(r * fl["clients"]), 1) for r in rates) / len(rates)
    return runs * fl["rounds"] * cohort * per_client


def client_samples(target: Target) -> float:
    """Client samples trained by the whole sweep."""
    return sum(preset_samples(target, p) for p in target.presets)


def models(target: Target, preset: str) -> list[str]:
    """The models a target runs on a preset: the preset's, or those its sweep sets (FedLAW Tables 1, 5, 9)."""
    swept = [m for m in dict(target.sweep).get("model", "").split(",") if m]
    return swept or [preset_cfg(preset)["model"]["name"]]


def cost_seconds(target: Target) -> tuple[float, bool]:
    """(estimated CPU seconds of the full sweep, whether every model's rate was measured at full length)."""
    total, measured = 0.0, True
    for preset in target.presets:
        names = models(target, preset)
        rates = [rate(m) for m in names]
        measured &= all(ok for _, ok in rates)
        total += preset_samples(target, preset) * sum(r for r, _ in rates) / len(rates)
    invocations = len(target.presets) * len(target.methods)
    return total + target.runs() * RUN_OVERHEAD_S + invocations * INVOCATION_OVERHEAD_S, measured


def estimated_models() -> list[str]:
    """Every model a target runs whose rate is estimated, not measured at full length."""
    names = {m for t in TARGETS for p in t.presets for m in models(t, p)}
    return sorted(m for m in names if not rate(m)[1])


# ---- measuring the step rates ----------------------------------------------------------------------------


def step_rate(preset: str, model: str, seconds: float = 3.0) -> float:
    """CPU seconds per sample of SGD steps of ``model`` at ``preset``'s batch size on random inputs (one thread)."""
    import torch

    from fedrun.config.validate import validate

    torch.set_num_threads(1)
    cfg = OmegaConf.create(preset_cfg(preset, f"model={model}"))
    spec = validate(cfg)
    shape, classes = SHAPES[spec.data.name]
    size = spec.data.params.image_size if getattr(spec.data.params, "image_size", None) else None
    shape = (shape[0], size, size) if size and len(shape) == 3 else shape
    net = spec.model.obj(spec.model.params, shape, classes)
    batch = int(spec.fl.batch_size)
    x = torch.randint(0, classes, (batch, *shape)) if len(shape) == 1 else torch.randn(batch, *shape)
    y = torch.randint(0, classes, (batch,))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    steps, start = 0, 0.0
    while steps < 3 or time.process_time() - start < seconds:
        if steps == 1:
            start = time.process_time()  # the first step warms up
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        steps += 1
    return (time.process_time() - start) / ((steps - 1) * batch)


SHAPES = {
    "fmnist": ((1, 28, 28), 10),
    "mnist": ((1, 28, 28), 10),
    "emnist": ((1, 28, 28), 62),
    "cifar10": ((3, 32, 32), 10),
    "cifar100": ((3, 32, 32), 100),
    "digit5": ((3, 28, 28), 10),
    "pacs": ((3, 224, 224), 7),
    "shakespeare": ((80,), 80),
}


def main() -> int:
    """Print each model's step rate (on the first preset that runs it), as :data:`STEP_SEC_PER_SAMPLE` reads."""
    seen: dict[str, str] = {}
    for t in TARGETS:
        for p in t.presets:
            for m in models(t, p):
                seen.setdefault(m, p)
    for m, p in seen.items():
        print(f'    "{m}": {step_rate(p, m):.2e},  # {p}', flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
