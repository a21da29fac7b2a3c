"""Errors that fedrun reports to the user as one line (exit code 2), never as a traceback."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value: names the field and what would be valid."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # picklable: crosses process boundaries (Ray actors)
        return type(self), (self.field, self.message)


class DataError(RuntimeError):
    """Missing or corrupt dataset files: names the file and how to get it."""


class DataMissing(DataError):
    """The dataset's files are not under ``data.root`` and were not downloaded (none asked, or no network).

    Unlike other DataErrors (a corrupt or wrong file) this one may be answered with stand-in data
    (``data.standin``, fedrun/data/standin.py).
    """


class DivergenceError(RuntimeError):
    """A NaN/inf loss or parameter appeared during training."""

    def __init__(self, round_idx: int, client: int | None, what: str) -> None:
        where = f"round {round_idx}" + (f", client {client}" if client is not None else "")
        super().__init__(f"diverged at {where}: {what}")
        self.round_idx = round_idx
        self.client = client
        self.what = what

    def __reduce__(self) -> tuple[type, tuple[int, int | None, str]]:  # picklable, as ConfigError
        return type(self), (self.round_idx, self.client, self.what)


class ResumeError(RuntimeError):
    """A run directory that cannot be continued (a different config, an unreadable checkpoint).

    Unlike ConfigError the directory is left untouched: it holds someone's earlier run.
    """
