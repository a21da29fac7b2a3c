"""The tracker contract and registry: a tracker is one module of this package that registers its class, with the
dataclass of its ``tracking.<name>.*`` settings (or none: then ``tracking.<name>`` is a plain on/off switch).

``fedrun/config/schema.py`` builds the ``tracking`` section from this registry (switches first, then sections, by
name), and conf/tracking/<name>.yaml turns it on (``tracking=[name]``). A settings dataclass has an ``enabled``
field; every other field is the tracker's own.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from fedrun.core.errors import ConfigError
from fedrun.core.registry import Registry

TRACKERS: Registry[Any] = Registry("tracker", "fedrun.storage.trackers")
REACH_SECONDS = 3.0  # how long a tracker server may take to accept a connection before the run is refused


class Tracker(ABC):
    """One tracker's sink for a run: :meth:`log` each evaluated row, :meth:`finish` at the end, :meth:`close`
    always. The class says what the run checks before it starts (:meth:`check`) and how it opens (:meth:`open`)."""

    title: ClassVar[str] = ""  # its name in error lines, e.g. "MLflow"
    needs: ClassVar[tuple[str, str] | None] = None  # (the module it imports, the extra that installs it)
    setting: ClassVar[str] = ""  # the key an error opening it names (tracking.<name>.<setting>); "" the section

    @classmethod
    def check(cls, settings: Any) -> None:
        """Refuse, in seconds and before the run writes anything, settings the tracker cannot work with (a server
        that cannot be reached); raise ConfigError naming the key (without ``tracking.<name>.``)."""
        return None

    @classmethod
    @abstractmethod
    def open(cls, settings: Any, run_dir: Path, config: dict[str, Any], group: str) -> Tracker:
        """The tracker for the run in ``run_dir`` with the resolved ``config``; ``group`` is the sweep directory
        of a multirun, else ``fedrun`` (an experiment, project group or similar)."""

    @abstractmethod
    def log(self, row: dict[str, Any]) -> None:
        """One evaluated round's metrics row (``round`` is the step)."""

    def finish(self, run_dir: Path, summary: dict[str, Any]) -> None:
        """The run ended with ``summary`` (written to summary.json): attach what it attaches, end the tracker run."""
        return None

    def close(self) -> None:
        """Release the tracker (idempotent; after :meth:`finish`, or when the run failed on the way)."""
        return None


def check_reachable(url: str, field: str, seconds: float = REACH_SECONDS) -> None:
    """Refuse an ``http(s)://`` server that does not accept a TCP connection within ``seconds``, in one line naming
    ``field``: the trackers' own clients retry for minutes. Other schemes (files, databases) are not checked here."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or ""
    except ValueError as e:  # a port that is not a number
        raise ConfigError(field, f"{url!r} is not a valid server address: {e}") from None
    if not host:
        raise ConfigError(field, f"{url!r} names no host")
    try:
        socket.create_connection((host, port), timeout=seconds).close()
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise ConfigError(field, f"cannot reach {url} ({why} within {seconds:g} s); is the server up?") from None
