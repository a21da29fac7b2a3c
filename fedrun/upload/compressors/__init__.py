"""Upload compressors (``compression.name``): one module each, found by :data:`~fedrun.upload.base.COMPRESSORS`."""
