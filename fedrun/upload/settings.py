"""The ``compression`` section (fedrun/upload/, docs/compression.md): the compressor (``compression.name``, a
registered name of fedrun/upload/compressors/ or ``none``) and its settings. A compressor with keys of its own
declares them in the dataclass it registers with; they join this section after its own keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedrun.core.errors import ConfigError
from fedrun.upload.base import COMPRESSORS

NONE = "none"  # compression.name without a compressor


@dataclass(frozen=True)
class CompressionSettings:
    """Compression of the clients' uploads (``compression.*``): a compressor applied to each client's update
    w_i - w^t (and to a method's extra uploads, e.g. SCAFFOLD's delta_c), with optional client-side error feedback.
    At its defaults (``compression=none``) no upload pipeline runs and the run is bit for bit the run of before the
    section existed.
    """

    name: str = "none"  # none | topk | randk (Stich et al. 2018) | qsgd (Alistarh et al. 2017) | sign (EF-signSGD)
    ratio: float = 0.01  # topk/randk: the share of the update's entries kept, k = ceil(ratio * d) (fedrun's choice)
    k: int | None = None  # topk/randk: the entries of the model update kept (1..d), instead of ratio
    levels: int = 16  # qsgd: s, the quantisation levels per sign (QSGD's experiments use s = 2^2..2^8; fedrun's 16)
    error_feedback: bool = False  # keep e_i <- p_i - C(p_i) per client, sent with the next update (Karimireddy 2019)

    def __post_init__(self) -> None:
        names = (NONE, *COMPRESSORS.names())
        if self.name not in names:
            raise ConfigError("name", f"invalid value {self.name!r}; valid: {', '.join(names)}")
        if not 0.0 < self.ratio <= 1.0:
            raise ConfigError("ratio", f"the share of entries kept, got {self.ratio}; valid: (0, 1] (0 sends nothing)")
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1):
            raise ConfigError("k", f"the entries kept, got {self.k!r}; valid: a whole number >= 1, or null (ratio)")
        if isinstance(self.levels, bool) or not isinstance(self.levels, int) or self.levels < 1:
            raise ConfigError("levels", f"qsgd's s, got {self.levels!r}; valid: a whole number of levels >= 1")
        if self.error_feedback and self.name == NONE:
            raise ConfigError(
                "error_feedback",
                "feeds back what a compressor dropped; valid: false with name=none,"
                f" or name one of {', '.join(names[1:])}",
            )

    @classmethod
    def of(cls, spec: Any) -> CompressionSettings:
        """The run's ``compression`` section (a :class:`~fedrun.config.schema.RunSpec`'s)."""
        out: CompressionSettings = spec.sections["compression"]
        return out
