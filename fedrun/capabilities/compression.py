"""Upload compression as a capability (``compression.*``; fedrun/upload/, docs/compression.md): the registered
compressor ``compression.name`` names (fedrun/upload/compressors/) as an upload stage, with error feedback's
residuals as per-client state rows (kept by the upload pipeline under the client-state key ``_upload``)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

from fedrun.capabilities.base import Capability, RunView
from fedrun.config.registry import CAPABILITIES
from fedrun.upload.base import COMPRESSORS, UploadStage
from fedrun.upload.settings import NONE, CompressionSettings


@CAPABILITIES.register("compression")
class Compression(Capability):
    """One compressor on every client's upload."""

    name: ClassVar[str] = "compression"
    section: ClassVar[str] = "compression"
    position: ClassVar[int] = 30
    Settings: ClassVar[type] = CompressionSettings

    @classmethod
    def active(cls, settings: CompressionSettings) -> bool:
        return settings.name != NONE

    @classmethod
    def client_numel(cls, settings: CompressionSettings, params: int) -> int:
        """Error feedback keeps each client's residual: a row of the model update's size (more with extra parts)."""
        return params if settings.error_feedback and settings.name != NONE else 0

    @classmethod
    def transforms_uploads(cls, settings: CompressionSettings) -> str | None:
        return "compression.name" if settings.name != NONE else None

    @classmethod
    def words(cls, settings: CompressionSettings) -> str:
        name = settings.name
        if name == NONE:
            return ""
        if name in ("topk", "randk"):
            what = f"k={settings.k}" if settings.k is not None else f"{settings.ratio:.3g}"
        elif name == "qsgd":
            what = f"s={settings.levels}"
        else:
            what = ""
        ef = " +EF" if settings.error_feedback else ""
        return f"{name}{' ' + what if what else ''}{ef}"

    @classmethod
    def tag(cls, settings: CompressionSettings) -> str:
        return cls.words(settings).replace(" +EF", "-ef").replace(" ", "").replace("=", "")

    @classmethod
    def identity(cls, node: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any] | None:
        """No compression drops out: the runs of before the section existed keep their identity."""
        defaults = {f.name: f.default for f in fields(CompressionSettings)}
        return None if all(node.get(k, v) == v for k, v in defaults.items()) else node

    @classmethod
    def stack_blocker(cls, settings: CompressionSettings) -> str | None:
        """It stacks: its upload stage and error feedback's rows act on each run's uploads after the client step."""
        return None

    def __init__(self, settings: CompressionSettings, run: RunView) -> None:
        super().__init__(settings, run)
        self.compressor: UploadStage = COMPRESSORS.get(settings.name).obj(settings)

    @classmethod
    def choices(cls) -> dict[str, list[str]]:
        return {"name": [NONE, *COMPRESSORS.names()]}

    @classmethod
    def contributors(cls) -> list[tuple[str, type | None]]:
        return [(n, COMPRESSORS.get(n).params) for n in COMPRESSORS.names()]

    def upload_stages(self) -> list[UploadStage]:
        return [self.compressor]

    def summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The bytes the run's clients uploaded in its evaluated rounds' rows, and the compressor's share of dense."""
        dim = sum(p.numel() for p in self.run.model.init_params().values())
        bits = self.compressor.bits_per_client(dim)
        ratio = (bits / (32.0 * dim)) if bits is not None else 1.0
        return {"compression": {"name": self.settings.name, "bits_of_dense": ratio}}

    def lines(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        ratio = summary["compression"]["bits_of_dense"]
        return [("uploads", f"{self.words(self.settings)}: {ratio:.3g} of the dense model update's bits")]
