"""A partition in words, for the title of its heatmap (``partition.png``, ``fedrun-report partition``): "Dirichlet
label skew, alpha = 0.5; 20 clients, seed 0" for ``dirichlet(alpha=0.5, variant=resample, min_size=10,
max_tries=1000)``. The parameter that sets how skewed the split is shows; how it is drawn (a variant, a retry limit)
does not: config.yaml has it. A partition this module does not know keeps its name and numeric parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _inner(p: Mapping[str, Any]) -> str:
    inner = p.get("inner", "dirichlet")
    inside = {
        "dirichlet": f"Dirichlet label skew inside, alpha = {_num(p.get('alpha'))}",
        "label_k": f"{p.get('k')} classes per client inside",
        "shards": f"{p.get('k')} label-sorted shards per client inside",
        "iid": "IID inside",
    }
    return "one domain per client, " + inside.get(inner, f"{inner} inside")


_WORDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "iid": lambda p: "IID, equal client sizes",
    "dirichlet": lambda p: f"Dirichlet label skew, alpha = {_num(p.get('alpha'))}",
    "dirichlet_equal": lambda p: f"Dirichlet label skew with equal client sizes, alpha = {_num(p.get('alpha'))}",
    "shards": lambda p: f"label-sorted shards, {p.get('shards_per_client')} per client",
    "label_k": lambda p: f"{p.get('k')} classes per client",
    "pct_noniid": lambda p: f"{_num(round(100 * (1 - float(p.get('iid_fraction', 0))), 6))}% non-IID",
    "hybrid": lambda p: f"FedLAW's hybrid split, alpha1 = {_num(p.get('alpha1'))}, alpha2 = {_num(p.get('alpha2'))}",
    "pachinko": lambda p: f"Pachinko allocation, alpha = {_num(p.get('alpha'))}, beta = {_num(p.get('beta'))}",
    "natural": lambda p: "the dataset's own clients",
    "domains": _inner,
    "pfllib": lambda p: (
        (
            f"PFLlib's pathological split, {p.get('class_per_client')} classes per client"
            if p.get("scheme", "pat") == "pat"
            else f"PFLlib's Dirichlet label skew, alpha = {_num(p.get('alpha'))}"
        )
        + ("" if p.get("balance") else ", unequal client sizes")
    ),
}


def partition_words(name: str, params: Mapping[str, Any], clients: Any, seed: Any) -> str:
    """``name`` with ``params`` (its config node, or the params dataclass as a dict) in words, then the client count
    and the seed."""
    try:
        what = _WORDS[name](params) if name in _WORDS else _fallback(name, params)
    except (TypeError, ValueError):  # a hand-edited config.yaml: its keys as they are
        what = _fallback(name, params)
    return f"{what}; {clients} clients, seed {seed}"


def _fallback(name: str, params: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k} = {_num(v)}" for k, v in params.items() if isinstance(v, int | float))
    return f"{name}, {shown}" if shown else name
