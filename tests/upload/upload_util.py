"""The upload pipeline a run's compression section asks for, built without the rest of the run."""

from __future__ import annotations

from fedrun.config.schema import RunSpec
from fedrun.upload.base import COMPRESSORS
from fedrun.upload.pipeline import UploadPipeline, build_pipeline
from fedrun.upload.settings import NONE, CompressionSettings


def pipeline_of(spec: RunSpec) -> UploadPipeline | None:
    """The pipeline of ``spec``'s compressor (None with compression=none), as the compression capability makes it."""
    settings = CompressionSettings.of(spec)
    if settings.name == NONE:
        return None
    return build_pipeline([COMPRESSORS.get(settings.name).obj(settings)])
