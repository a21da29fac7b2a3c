"""Malformed input of every kind: one line on stderr naming the field, exit code 2, no traceback, no work done.

Most cases call ``fedrun.cli.main.main`` in-process with ``sys.argv`` set (the same code path as the console
script, minus interpreter start-up); two run the real subprocess to confirm the end-to-end behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fedrun.config.registry import DATASETS, MODELS, DataSignature, build_params
from fedrun.config.schema import Component, RunSpec
from fedrun.config.validate import resolve, validate
from fedrun.core.errors import ConfigError
from fedrun.papers.cost import preset_cfg
from tests.conftest import REPO, compose_cfg, main_exit_code

BASE = ["experiment=smoke", "output.quiet=true", "output.plots=false", "fl.rounds=1"]

# (overrides, the field the one-line error must name)
MALFORMED = [
    # wrong types, caught by the structured schema while composing
    ("fl.clients=abc", "fl.clients"),
    ("fl.rounds=1.5", "fl.rounds"),
    ("fl.rounds=", "fl.rounds"),
    ("fl.batch_size=true", "fl.batch_size"),
    ("fl.lr=[1,2]", "fl.lr"),
    ("output.plots=maybe", "output.plots"),
    ("checkpoint.every=x", "checkpoint.every"),
    ("seed=abc", "seed"),
    ("fl=oops", "fl"),
    ("fl.lr", "fl.lr"),  # not an override at all
    # wrong types inside free-form groups, caught by the registries
    ("model.hidden=abc", "model.hidden"),
    # negatives, zeros, out of range, non-finite
    ("fl.clients=-3", "fl.clients"),
    ("fl.clients=0", "fl.clients"),
    ("fl.lr=-0.1", "fl.lr"),
    ("fl.lr=inf", "fl.lr"),
    ("fl.participation=nan", "fl.participation"),
    ("fl.participation=2", "fl.participation"),
    ("fl.momentum=1.5", "fl.momentum"),
    ("fl.grad_clip=0", "fl.grad_clip"),
    ("fl.local_steps=0", "fl.local_steps"),
    ("eval.every=0", "eval.every"),
    ("eval.target=1.5", "eval.target"),
    ("hardware.threads=-2", "hardware.threads"),
    ("checkpoint.every=-1", "checkpoint.every"),
    ("model.hidden=[0]", "model.hidden"),
    ("model.dropout=1.5", "model.dropout"),
    ("partition.alpha=-1", "partition.alpha"),
    ("data.max_train_samples=-5", "data.max_train_samples"),
    ("seed=-1", "seed"),
    # huge values
    ("seed=99999999999999999999", "seed"),
    ("fl.lr_decay=1e300", "fl.lr_decay"),
    # unknown choices, unknown keys, unknown group options
    ("fl.sampling=random", "fl.sampling"),
    ("hardware.device=tpu", "hardware.device"),
    ("hardware.engine=warp", "hardware.engine"),
    ("hardware.precision=fp8", "hardware.precision"),
    ("hardware.stack=wide", "hardware.stack"),
    ("hardware.stack=0", "hardware.stack"),
    ("hardware.stack=-2", "hardware.stack"),
    ("hardware.parallel=many", "hardware.parallel"),
    ("hardware.parallel=0", "hardware.parallel"),
    ("hardware.parallel=-1", "hardware.parallel"),
    ("algorithm=nope", "algorithm"),
    ("model=nope", "model"),
    ("partition=nope", "partition"),
    ("fl.bogus=1", "fl.bogus"),
    ("+fl.bogus=1", "fl.bogus"),
    ("+bogus=1", "bogus"),
    # cross-field checks
    ("fl.participation=0.01", "fl.participation"),  # 0.01 x 10 clients: nobody trains
    ("fl.clients=100000", "fl.clients"),  # more clients than training samples
    ("data=synthetic model=cnn", "model.name"),  # the model's input shape vs the dataset's
    # every model/data mismatch, before any file is read (issue 23: a torch dtype error, exit 1, before)
    ("data=shakespeare model=mlp", "model.name"),  # token ids into a float layer
    ("data=cifar10 model=lstm", "model.name"),  # images into the next-character LSTM
    ("data=cifar10 model=cnn", "model.name"),  # 3x32x32 into a 28x28 CNN
    ("data=mnist data.image_size=32", "model.name"),  # MNIST's CNN (28 px) on MNIST padded to 32
    ("data=shakespeare data.image_size=32", "data.image_size"),  # padding text
    ("corrupt.fraction=2", "corrupt.fraction"),
    ("corrupt.fraction=0.5 corrupt.labels=[0,10]", "corrupt.labels"),  # label 10 of a 10-class dataset
]


@pytest.fixture
def fedrun_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path) -> Callable:
    """Call ``fedrun`` in-process: returns (exit code, stderr, run dir)."""

    def _call(*overrides: str) -> tuple[int | None, str, Path]:
        run_dir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        argv = ["fedrun", *BASE, *overrides, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
        code = main_exit_code(monkeypatch, argv)
        return code, capsys.readouterr().err, run_dir

    return _call


def _assert_one_line_error(code: int | None, err: str, field: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fedrun: error: ")
    assert "Traceback" not in err
    assert re.search(rf"(?<![\w.]){re.escape(field)}\b", lines[0]), f"{field!r} not named in: {lines[0]}"


@pytest.mark.parametrize(("overrides", "field"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_override_is_one_clean_line(fedrun_main: Callable, overrides: str, field: str) -> None:
    code, err, run_dir = fedrun_main(*overrides.split())
    _assert_one_line_error(code, err, field)
    # nothing was trained: the run dir (if Hydra made one) holds only the error
    if run_dir.exists():
        assert sorted(p.name for p in run_dir.iterdir() if p.name != ".hydra") == ["error.txt"]


def test_unknown_choices_are_listed(fedrun_main: Callable) -> None:
    _, err, _ = fedrun_main("algorithm=nope")
    assert "valid: " in err and "fedavg" in err and "fedprox" in err
    _, err, _ = fedrun_main("fl.sampling=random")
    assert "valid: fixed, bernoulli" in err


def test_console_script_end_to_end(run_cli: Callable, tmp_path: Path) -> None:
    res = run_cli(*BASE, "fl.lr=-1")
    _assert_one_line_error(res.returncode, res.stderr, "fl.lr")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".hydra", "error.txt"]


def test_target_keys_are_never_instantiated(fedrun_main: Callable, tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("still here")
    for group in ("data", "model", "algorithm", "partition", "hardware"):
        code, err, _ = fedrun_main(f"+{group}._target_=os.remove", f"+{group}.path={sentinel}")
        _assert_one_line_error(code, err, f"{group}._target_")
    assert sentinel.read_text() == "still here"
    # and nothing in fedrun hands a config to Hydra's instantiate()
    sources = [p.read_text() for p in (REPO / "fedrun").rglob("*.py")]
    assert not any(re.search(r"\binstantiate\s*\(", s) for s in sources)


def test_a_mismatch_names_the_data_and_the_models_that_fit(fedrun_main: Callable) -> None:
    """data=shakespeare with an image model or the MLP is refused naming its input and the LSTM."""
    for model in ("mlp", "simplecnn"):
        code, err, _ = fedrun_main("data=shakespeare", f"model={model}")
        _assert_one_line_error(code, err, "model.name")
        assert f"model={model} does not fit data=shakespeare (token ids [80], 80 symbols)" in err
        assert err.strip().endswith("valid with data=shakespeare: lstm"), err
    code, err, _ = fedrun_main("data=cifar10", "model=lstm")
    assert "(images [3, 32, 32], 10 classes)" in err and "simplecnn" in err and "lstm" not in err.split("valid")[1]


# ---- every (dataset, model) pair of the registries: builds and runs on stand-in data, or one line, exit 2 ----

_STANDIN_DATA: dict[str, Any] = {}


def _standin_data(name: str, params: Any) -> Any:
    """Dataset ``name``'s stand-in (the generated synthetic data itself), normalised as a run's is."""
    if name not in _STANDIN_DATA:
        from fedrun.data.base import pad_images
        from fedrun.data.standin import standin

        entry = DATASETS.get(name)
        data = standin(name, params) if entry.standin is not None else entry.obj(params)
        _STANDIN_DATA[name] = pad_images(data, params.image_size).normalised(params.normalize)
    return _STANDIN_DATA[name]


def _forward(spec: RunSpec) -> torch.Tensor:
    """The spec's model, built (initialised as a run builds it) and run on two stand-in training inputs."""
    from fedrun.data.base import Preprocess

    data = _standin_data(spec.data.name, spec.data.params)
    module = spec.model.obj(spec.model.params, data.input_shape, data.num_classes).eval()
    with torch.no_grad():
        return module(Preprocess(data.mean, data.std, torch.float32)(data.train.x[:2]))


_COMPOSED: dict[str, dict[str, Any]] = {}
PAIRS = [(d, m) for d in DATASETS.names() for m in MODELS.names()]


@pytest.mark.parametrize(("data", "model"), PAIRS, ids=[f"{d}-{m}" for d, m in PAIRS])
def test_every_dataset_model_pair_runs_or_is_refused_in_one_line(data: str, model: str) -> None:
    """Each pair either validates, and then its model builds and scores a stand-in batch; or validation refuses it
    with a one-line ConfigError naming model.name and the models that fit, and the real build or forward fails too
    (the check refuses no pair that would train)."""
    if data not in _COMPOSED:  # composed once per dataset; each model at its defaults, as model=<name> gives
        _COMPOSED[data] = resolve(compose_cfg([f"data={data}", "data.standin=true"]))
    try:
        spec = validate({**_COMPOSED[data], "model": {"name": model}})
    except ConfigError as e:
        assert e.field == "model.name" and "\n" not in str(e), str(e)
        assert f"model={model} does not fit data={data}" in e.message and f"valid with data={data}: " in e.message
        spec = validate(_COMPOSED[data])  # the dataset's default model fits
        entry = MODELS.get(model)
        params = build_params(entry.params, {}, "model") if entry.params is not None else None
        spec.model = Component(model, entry.obj, params)
        with pytest.raises(Exception):  # noqa: B017 - whatever the model raises on this input
            out = _forward(spec)
            assert out.shape == (2, _standin_data(data, spec.data.params).num_classes)
        return
    out = _forward(spec)
    assert out.shape == (2, _standin_data(data, spec.data.params).num_classes)
    assert torch.isfinite(out).all()


def test_every_dataset_registers_a_signature_that_matches_its_data() -> None:
    """The signature a dataset declares (what the fit check reads) is its stand-in's (or generated data's) input
    shape, classes and kind, also where parameters change them."""
    variants = {
        "mnist": [{"image_size": 32}],
        "fmnist": [{"image_size": 32}],
        "emnist": [{"split": "letters"}, {"source": "leaf"}],
        "pacs": [{"crop": 64, "resize": 64}],
        "shakespeare": [{"seq_len": 20}],
        "synthetic": [{"dim": 7, "classes": 3}],
    }
    for name in DATASETS.names():
        entry = DATASETS.get(name)
        assert entry.signature is not None, f"data source {name} registers no signature"
        for extra in [{}, *variants.get(name, [])]:
            params = build_params(entry.params, extra, "data")
            _STANDIN_DATA.pop(name, None)
            data = _standin_data(name, params)
            _STANDIN_DATA.pop(name, None)
            x = data.train.x
            kind = "images" if x.dtype == torch.uint8 else "features" if x.is_floating_point() else "tokens"
            assert entry.signature(params) == DataSignature(data.input_shape, data.num_classes, kind), (name, extra)


def test_image_size_is_refused_before_any_file_is_read() -> None:
    with pytest.raises(ConfigError, match=r"data.image_size: 20 is smaller than cifar10's 32x32 images"):
        validate(compose_cfg(["data=cifar10", "data.image_size=20"]))


# ---- the model a dataset gets without model= ----

# the model of each dataset's papers (conf/data/*.yaml); fmnist's MLP is make run's (84.4%, FedLAW Table 3)
DEFAULT_MODELS = {
    "cifar10": "simplecnn",
    "cifar100": "simplecnn",
    "digit5": "digit5_cnn",
    "emnist": "emnist_cnn",
    "fmnist": "mlp",
    "fmnist_domains": "digit5_cnn",
    "mnist": "cnn",
    "pacs": "alexnet",
    "shakespeare": "lstm",
    "synthetic": "mlp",
}


@pytest.mark.parametrize("data", sorted(DEFAULT_MODELS))
def test_a_dataset_without_model_gets_its_papers_model(data: str) -> None:
    """data=X alone composes X's model (it validates: it fits); model=... and presets still choose."""
    cfg = compose_cfg([f"data={data}", "data.standin=true"])
    assert cfg.model.name == DEFAULT_MODELS[data]
    assert validate(cfg).model.name == DEFAULT_MODELS[data]
    assert compose_cfg([f"data={data}", "model=resnet20"]).model.name == "resnet20"  # an explicit model= wins


def test_every_data_option_names_a_model() -> None:
    """Every dataset's YAML chooses its model (a new one is not left to the MLP by accident)."""
    names = sorted(p.stem for p in (REPO / "conf" / "data").glob("*.yaml"))
    assert names == sorted(DEFAULT_MODELS) == DATASETS.names()
    for name in names:
        text = (REPO / "conf" / "data" / f"{name}.yaml").read_text()
        assert f"- override /model@_global_.model: {DEFAULT_MODELS[name]} " in text, name


def test_presets_keep_their_models() -> None:
    """A preset's ``override /model`` wins over its dataset's default model (and make run's default is the MLP)."""
    default = compose_cfg([])
    assert default.model.name == "mlp" and default.data.name == "fmnist"
    for path in sorted((REPO / "conf" / "experiment").glob("*.yaml")):
        m = re.search(r"override /model: (\w+)", path.read_text())
        if m:  # each preset composed once per process (preset_cfg's cache, shared with the papers' tests)
            assert preset_cfg(path.stem)["model"]["name"] == m.group(1), path.stem


class _ItemModel(torch.nn.Module):
    """A model with a data-dependent branch (``.item()``, which has no meta kernel) and a fixed 7-class head."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(width, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) if x.abs().sum().item() >= 0 else -self.fc(x)


@pytest.mark.parametrize("on_cpu", [True, False], ids=["small-on-cpu", "large-on-meta"])
def test_a_new_model_is_checked_by_running_it(monkeypatch: pytest.MonkeyPatch, on_cpu: bool) -> None:
    """A model the meta device cannot run is run for real; a head of the wrong size is refused by its output
    (the small-model path on CPU, and the meta path a model above PROBE_ON_CPU takes)."""
    from fedrun.config import fit as schema
    from fedrun.config.fit import fit_error
    from fedrun.config.registry import Entry

    monkeypatch.setattr(schema, "_FIT_CACHE", {})
    if not on_cpu:
        monkeypatch.setattr(schema, "PROBE_ON_CPU", 0)
    monkeypatch.setitem(MODELS._entries, "item7", Entry("item7", lambda p, shape, c: _ItemModel(shape[0]), None))
    assert fit_error("item7", None, DataSignature((60,), 7, "features")) is None
    assert fit_error("item7", None, DataSignature((60,), 10, "features")) == (
        "it gives [7] per input, not the 10 class scores"
    )
    assert "dtype" in (fit_error("item7", None, DataSignature((60,), 7, "tokens")) or "")


def test_the_fit_check_gives_the_meta_devices_verdicts_without_importing_dynamo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Registered models run on CPU with zero weights give the meta device's verdict on every (dataset, model)
    pair of three datasets, and the check imports neither torch._dynamo (about a second of every sequential run's
    start-up) nor sympy (what ``Module.to_empty`` on a meta model imports: half a second); checked in a fresh
    interpreter."""
    import subprocess
    import sys

    from fedrun.config import fit as schema

    sigs = [
        DATASETS.get(d).signature(build_params(DATASETS.get(d).params, {}, "data"))
        for d in ("fmnist", "shakespeare", "cifar10")
    ]
    verdicts = {}
    for limit in (schema.PROBE_ON_CPU, 0):
        monkeypatch.setattr(schema, "_FIT_CACHE", {})
        monkeypatch.setattr(schema, "PROBE_ON_CPU", limit)
        verdicts[limit] = [
            schema.fit_error(m, build_params(MODELS.get(m).params, {}, "model"), sig) is None
            for sig in sigs
            for m in MODELS.names()
        ]
    assert verdicts[schema.PROBE_ON_CPU] == verdicts[0] and any(verdicts[0]) and not all(verdicts[0])
    code = (
        "import sys; import fedrun.run.experiment; from fedrun.config.registry import DATASETS, MODELS, build_params;"
        " from fedrun.config.fit import fit_error; d = DATASETS.get('fmnist');"
        " sig = d.signature(build_params(d.params, {}, 'data'));"
        " assert fit_error('mlp', build_params(MODELS.get('mlp').params, {}, 'model'), sig) is None;"
        " print('torch._dynamo' in sys.modules, 'sympy' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "False False", res.stderr[-2000:]
