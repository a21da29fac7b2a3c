"""The ``capability-input`` table (issue 49, round four; issue 52): bad input to the capabilities (the simulated system
and its async servers, privacy, compression, personalised evaluation, attacks and defences) is one line naming the key
and the valid values, whose lists are the registries', exit 2, and nothing written into the run dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrun.privacy.registries import MECHANISMS
from fedrun.robust.base import ATTACKS, DEFENCES
from fedrun.system.registries import DEVICE_PROFILES, SERVERS
from fedrun.upload.base import COMPRESSORS
from tests.hostile import Case, ids, run_case

CATEGORY = "capability-input"


def _r(*args: str) -> tuple[str, ...]:
    return (*args, "hydra.run.dir={t}/r")


CASES = [
    Case("privacy-mode-unknown", _r("privacy.mode=global"), 2,
         ("privacy.mode: invalid value 'global'; valid: none, " + ", ".join(MECHANISMS.names()),)),
    Case("compressor-unknown", _r("compression.name=zip"), 2,
         ("compression.name: invalid value 'zip'; valid: none, " + ", ".join(COMPRESSORS.names()),)),
    Case("server-unknown", _r("system.server=lazy"), 2,
         ("system.server: invalid value 'lazy'; valid: sync, " + ", ".join(SERVERS.names()),)),
    Case("devices-unknown", _r("system.devices=phones"), 2,
         ("system.devices: invalid value 'phones'; valid: " + ", ".join(DEVICE_PROFILES.names()),)),
    Case("clip-overflows-fp32", _r("privacy=client", "privacy.clip=1e300"), 2,
         ("privacy.clip: 1e+300 overflows fp32 arithmetic", "valid: 0 < clip <=")),
    Case("clip-zero", _r("privacy=client", "privacy.clip=0"), 2, ("privacy.clip: must be > 0",)),
    Case("target-unreachable", _r("privacy=client", "privacy.target_epsilon=0.001", "fl.rounds=100"), 2,
         ("privacy.target_epsilon: 0.001 is unreachable",)),
    Case("dp-with-dropout", _r("privacy=client", "system.dropout=0.2"), 2,
         ("system: is not covered by the privacy analysis",)),
    Case("client-dp-with-scaffold", _r("privacy=client", "algorithm=scaffold"), 2,
         ("algorithm.name: scaffold uploads more than its model", "valid with privacy.mode=client:")),
    Case("dp-sgd-with-sam", _r("privacy=sample", "algorithm=fedsam"), 2,
         ("algorithm.name: fedsam computes its own local gradient",)),
    Case("adaptive-clip-at-sample-level", _r("privacy=sample", "privacy.adaptive_clip=true"), 2,
         ("privacy.adaptive_clip: is client-level DP's",)),
    Case("dp-with-batchnorm", _r("experiment=smoke", "data=cifar10", "data.standin=true", "model=resnet20",
                                 "privacy=client", "fl.clients=4", "fl.rounds=1", "data.max_train_samples=40",
                                 "data.max_test_samples=200", "hardware.threads=1", "output.quiet=true",
                                 "cache_dir={t}/cache"), 2,
         ("privacy.mode: client: model=resnet20 has BatchNorm statistics",), tiny=False),
    Case("topk-k-beyond-the-model", _r("compression=topk", "compression.k=100000000"), 2,
         ("compression.k: 100000000 is more than the",)),
    Case("error-feedback-without-compressor", _r("compression.error_feedback=true"), 2,
         ("compression.error_feedback: feeds back what a compressor dropped",)),
    Case("async-with-compression", _r("system.server=fedbuff", "system.buffer=2", "compression=topk"), 2,
         ("compression.name: not with system.server=fedbuff",)),
    Case("async-with-ima", _r("system.server=fedasync", "ima.enabled=true"), 2,
         ("system.server: fedasync replaces the server step",)),
    Case("buffer-over-concurrency", _r("system.server=fedbuff", "system.buffer=9"), 2,
         ("system.buffer: not with system.server=fedbuff; valid: at most the concurrency",)),
    Case("trace-without-devices-trace", _r("system.trace=x.json"), 2, ("system.devices: devices=trace reads",)),
    Case("finetune-without-local-test", _r("eval.local_test=none", "eval.finetune_steps=3"), 2,
         ("eval.finetune_steps: fine-tuned models are evaluated on local test splits",)),
    Case("unseen-for-a-global-method", _r("eval.unseen_clients=2"), 2,
         ("eval.unseen_clients: unseen clients are evaluated on local test splits",)),
    # the red team's next round: a capability's key on a run that has it off, and a negative local-test seed
    Case("local-test-fraction-one", _r("eval.local_test=split", "eval.local_test_fraction=1"), 2,
         ("eval.local_test_fraction: must be in (0.0, 1.0)",)),
    # robust FL (issue 52): a rule or attack that does not exist, a combination robust aggregation cannot be run
    # with, a cohort no rule can tolerate f in, an attack that cannot be what it says
    Case("attack-unknown", _r("attack.name=poison"), 2,
         ("attack.name: invalid value 'poison'; valid: none, " + ", ".join(ATTACKS.names()),)),
    Case("defence-unknown", _r("defence.name=shield"), 2,
         ("defence.name: invalid value 'shield'; valid: none, " + ", ".join(DEFENCES.names()),)),
    Case("defence-with-scaffold", _r("defence=krum", "algorithm=scaffold"), 2,
         ("algorithm.name: scaffold uploads more than its model", "valid with a defence: fedadagrad,")),
    Case("defence-with-client-dp", _r("defence=median", "privacy=client"), 2,
         ("privacy.mode: client: DP-FedAvg's analysis covers the noisy mean", "valid with a defence: none")),
    Case("defence-with-async", _r("defence=median", "system.server=fedasync"), 2,
         ("defence.name: not with system.server=fedasync",)),
    Case("trim-half", _r("defence=trimmed_mean", "defence.beta=0.5"), 2,
         ("defence.beta: must be in [0.0, 0.5), got 0.5",)),
    Case("attack-fraction-one", _r("attack=sign_flip", "attack.fraction=1.0"), 2,
         ("attack.fraction: must be in [0.0, 1.0), got 1.0",)),
    Case("attack-fraction-negative", _r("attack=sign_flip", "attack.fraction=-0.1"), 2,
         ("attack.fraction: must be in [0.0, 1.0), got -0.1",)),
    Case("backdoor-target-not-a-class", _r("attack=backdoor", "attack.target=10"), 2,
         ("attack.target: 10 is not a class; valid: 0..9",)),
    Case("krum-cohort-too-small", _r("defence=krum", "defence.f=1"), 2,
         ("defence.f: krum needs at least 5 uploads to tolerate 1 Byzantine, got 4", "largest cohort")),
    Case("bulyan-cohort-too-small", _r("defence=bulyan", "fl.clients=10"), 2,
         ("defence.name: bulyan needs at least 11 uploads to tolerate 2 Byzantine, got 10",)),
    Case("fltrust-without-proxy", _r("defence=fltrust", "proxy.per_class=0"), 2,
         ("proxy.per_class: fltrust trains its root update on the proxy split",)),
    Case("key-of-another-attack", _r("attack=ipm", "attack.z=1.5"), 2,
         ("attack.z: is a setting of alie, not of ipm; valid: attack.name=alie",)),
    Case("knowledge-without-a-choice", _r("attack=gaussian", "attack.knowledge=omniscient"), 2,
         ("attack.knowledge: is a setting of alie,", "not of gaussian")),
    # an attack's window of rounds: one that no round of the run falls in, or that is not one
    Case("attack-window-before-the-first-round", _r("attack=sign_flip", "attack.start_round=0"), 2,
         ("attack.start_round: must be an integer >= 1 (the first round), got 0",)),
    Case("attack-window-ends-before-it-starts", _r("attack=sign_flip", "fl.rounds=4", "attack.start_round=3",
                                                   "attack.end_round=2"), 2,
         ("attack.end_round: must be null (to the end) or an integer >= attack.start_round (3), got 2",)),
    Case("attack-window-after-the-last-round", _r("attack=sign_flip", "attack.start_round=2"), 2,
         ("attack.start_round: 2 is after the run's last round (fl.rounds=1), so no round would be attacked;"
          " valid: 1..1",)),
    Case("attack-window-not-an-integer", _r("attack=sign_flip", "fl.rounds=4", "attack.start_round=2.5"), 2,
         ("attack.start_round: Value '2.5' of type 'float' could not be converted to Integer",)),
    Case("attack-window-without-an-attack", _r("fl.rounds=4", "attack.end_round=2"), 2,
         ("attack.end_round: sets the rounds an attack runs in, and attack.name is none",)),
    Case("attack-window-under-an-async-server", _r("attack=label_flip", "fl.rounds=4", "attack.start_round=2",
                                                   "system=fedbuff", "system.buffer=2"), 2,
         ("attack.start_round: not with system.server=fedbuff: its steps are server updates, not rounds",)),
    Case("pre-aggregator-without-a-rule", _r("defence.pre=bucketing"), 2,
         ("defence.pre: bucketing mixes the uploads in front of a rule",)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_capability_input(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "r" / "metrics.csv").exists()
