"""The ``capability-input`` table (issue 49, round four): bad input to the capabilities (the simulated system and its
async servers, privacy, compression, personalised evaluation) is one line naming the key and the valid values, whose
lists are the registries', exit 2, and nothing written into the run dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrun.privacy.registries import MECHANISMS
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
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_capability_input(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_case(case, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "r" / "metrics.csv").exists()
