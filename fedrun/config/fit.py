"""Does the model fit the data? Refused before any file is read: the model is built (on PyTorch's meta device, or
on CPU with zero weights) and run on two zero inputs of the dataset's registered signature."""

from __future__ import annotations

from typing import Any

from fedrun.config.registry import DATASETS, MODELS, DataSignature, build_params
from fedrun.core.errors import ConfigError

_FIT_CACHE: dict[tuple[str, str, DataSignature], str | None] = {}
# the largest model (parameters and buffers, in numbers) fit_error runs on CPU with zero weights: at most 128 MB
# of float32; the largest registered one, wrn56_4 on CIFAR, holds 13.6 million
PROBE_ON_CPU = 32_000_000


def fit_error(model: str, params: Any, data: DataSignature) -> str | None:
    """Why model ``model`` with hyperparameters ``params`` cannot train on data of signature ``data``; None if it can.

    The model is built as its registry entry builds it on PyTorch's meta device (shapes, no memory, no
    initialisation) and run on a batch of two zero inputs of the data's kind (float images or features, int64
    token ids). A model of up to :data:`PROBE_ON_CPU` numbers (every registered one at its papers' sizes) runs on
    CPU with zero weights: milliseconds, where the meta kernels' Python decompositions import ``torch._dynamo``
    (about a second of the start-up of every run that never uses it). A larger one runs on the meta device,
    which computes shapes and no numbers, and again on CPU with zero weights for token ids (the meta kernels let
    a float layer take them) or an operation without a meta kernel. What that raises (the model's own input
    check, or PyTorch's error: a shape or dtype mismatch) is the why, as is an output that is not one score per
    class. Nothing is trained, and the answer is kept for the process (validating a sweep's jobs checks each pair
    once).
    """
    key = (model, repr(params), data)
    if key not in _FIT_CACHE:
        _FIT_CACHE[key] = _probe(MODELS.get(model).obj, params, data)
    return _FIT_CACHE[key]


def _probe(build: Any, params: Any, data: DataSignature) -> str | None:
    import torch  # only here: the rest of validation runs without it

    dtype = torch.int64 if data.inputs == "tokens" else torch.float32
    try:
        with torch.device("meta"):
            module = build(params, data.input_shape, data.num_classes).eval()
            real = sum(t.numel() for t in (*module.parameters(), *module.buffers())) <= PROBE_ON_CPU
            if not real:
                try:
                    out = module(torch.zeros((2, *data.input_shape), dtype=dtype))
                    real = data.inputs == "tokens"  # the meta kernels let a float layer take integer ids
                except (NotImplementedError, RuntimeError) as e:
                    if "meta" not in str(e):  # an operation without a meta kernel (.item()...): run it for real
                        raise
                    real = True
        if real:
            module = module._apply(_zeros_on_cpu)
            with torch.no_grad():
                out = module(torch.zeros((2, *data.input_shape), dtype=dtype))
    except ConfigError as e:
        return e.message
    except Exception as e:  # noqa: BLE001 - whatever the model raises on this input is why it does not fit
        return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, data.num_classes):
        got = list(out.shape[1:]) if isinstance(out, torch.Tensor) else type(out).__name__
        return f"it gives {got} per input, not the {data.num_classes} class scores"
    return None


def _zeros_on_cpu(t: Any) -> Any:  # t: a tensor on the meta device
    """A CPU tensor of zeros of ``t``'s shape and dtype: ``Module.to_empty``'s ``empty_like`` of a meta tensor runs
    PyTorch's Python reference, which imports sympy (about half a second of every run's start-up)."""
    import torch

    return torch.zeros(t.shape, dtype=t.dtype)


def models_for(data: DataSignature) -> list[str]:
    """The registered models that train on data of signature ``data`` at their default hyperparameters."""
    fits = []
    for name in MODELS.names():
        cls = MODELS.get(name).params
        if fit_error(name, build_params(cls, {}, "model") if cls is not None else None, data) is None:
            fits.append(name)
    return fits


def check_model_fits_data(spec: Any) -> None:
    """Refuse, before any file is read, a model that cannot train on the dataset: one line naming both, the
    dataset's input, why, and the models that fit it. Driven by the dataset's registered signature
    (:class:`~fedrun.config.registry.DataSignature`) and the model's own builder (:func:`fit_error`), so a new
    dataset or model is covered; a dataset that registered no signature (a user's) is not checked here."""
    entry = DATASETS.get(spec.data.name)
    if entry.signature is None:
        return
    data = entry.signature(spec.data.params)
    why = fit_error(spec.model.name, spec.model.params, data)
    if why is None:
        return
    d, m = spec.data.name, spec.model.name
    valid = ", ".join(models_for(data)) or "none of the registered models"
    raise ConfigError(
        "model.name", f"model={m} does not fit data={d} ({data.describe()}): {why}; valid with data={d}: {valid}"
    )


_MODULES: dict[tuple[str, str, DataSignature], tuple[tuple[str, ...], tuple[str, ...]] | None] = {}


def _meta_names(spec: Any) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(its buffers, its modules that draw random numbers) of the run's model, built on PyTorch's meta device from the
    dataset's registered signature (nothing allocated, kept for the process); None when the dataset registered no
    signature or the model cannot be built (the fit check says why)."""
    import torch

    entry = DATASETS.get(spec.data.name)
    if entry.signature is None:
        return None
    data = entry.signature(spec.data.params)
    key = (spec.model.name, repr(spec.model.params), data)
    if key not in _MODULES:
        try:
            with torch.device("meta"):
                module = MODELS.get(spec.model.name).obj(spec.model.params, data.input_shape, data.num_classes)
        except Exception:  # noqa: BLE001 - check_model_fits_data names why it cannot be built
            _MODULES[key] = None
            return None
        draws = tuple(
            name
            for name, m in module.named_modules()
            if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0  # noqa: SLF001 - torch's dropout base
        )
        _MODULES[key] = (tuple(name for name, _ in module.named_buffers()), draws)
    return _MODULES[key]


def model_buffers(spec: Any) -> tuple[str, ...] | None:
    """The names of the buffers (BatchNorm statistics) of the run's model (:func:`_meta_names`); None when it cannot
    be told."""
    names = _meta_names(spec)
    return None if names is None else names[0]


def model_draws(spec: Any) -> tuple[str, ...] | None:
    """The names of the run's model's modules that draw random numbers in training (dropout, from torch's global
    generator); None when it cannot be told."""
    names = _meta_names(spec)
    return None if names is None else names[1]
