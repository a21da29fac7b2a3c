"""A run's status, as summary.json's ``status`` field holds it.

One enum instead of string literals: ``Status`` is a ``str`` subclass, so ``Status.COMPLETED == "completed"`` and
it serialises into JSON and pandas columns as the plain word old run directories hold.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """How a run stands: ``running`` while a process trains it, else how it ended."""

    RUNNING = "running"
    COMPLETED = "completed"
    DIVERGED = "diverged"
    INTERRUPTED = "interrupted"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    @property
    def ended(self) -> bool:
        """Whether the run ended (any status but ``running``)."""
        return self is not Status.RUNNING

    @classmethod
    def parse(cls, value: object) -> Status | None:
        """The status named by ``value`` (a word of summary.json), None for anything else."""
        try:
            return cls(value)
        except ValueError:
            return None


# the statuses a run ends in, in the order a report lists them
ENDED = tuple(s for s in Status if s.ended)
