"""The upload pipeline (docs/compression.md): transforms applied to each client's update between the method's
``client_finish`` and its ``aggregate`` (compression with error feedback here; clipping and privacy noise as
further stages), vectorised over the cohort."""
