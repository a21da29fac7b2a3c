"""The files a run reads by path, kept by content: a run continues only on the files it started with.

A config key can name a file the run reads (``system.trace``: a device trace, and for FedScale's capacity pickle
the behaviour pickle beside it). The run directory keeps only the key's value, the path, so a file edited between
a kill and its resume, before an extension or before a sweep grows would be used silently, and the rounds run on
either side of the edit would not be one run. When a run starts, the SHA-256 of each such file is written into
the run directory (``inputs.json``, :attr:`RunDir.inputs_file`); a resume, an extension or a sweep that meets
the run again is refused in one line naming the key and the file when a file's content differs
(:func:`check_inputs`, called by fedrun/run/checkpoint.py's ``check_run_dir``).

Reading never blocks: a file is opened non-blocking and read only when it is a regular file (a FIFO, a device such
as ``/dev/zero`` or a directory is reported as what it is, :func:`open_regular`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fedrun.core.errors import ConfigError
from fedrun.storage.atomic import write_json
from fedrun.storage.rundir import RunDir

INPUTS_FORMAT = 1
RECORD_LIMIT = 1 << 20  # inputs.json is a few hundred bytes: a larger one is not fedrun's
PICKLES = (".pkl", ".pickle")
KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
}


class NotRegularFile(OSError):
    """A path that leads (through links) to something other than a regular file; ``kind`` says what."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(f"{path}: not a regular file ({kind})")
        self.kind = kind


def behaviour_file(trace: Path) -> Path | None:
    """The behaviour pickle fedrun reads beside a FedScale capacity pickle (``<stem>.behave<suffix>``; None for a
    trace of another format)."""
    return trace.with_name(f"{trace.stem}.behave{trace.suffix}") if trace.suffix in PICKLES else None


@contextlib.contextmanager
def open_regular(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened for reading, only when it is a regular file: opened non-blocking (a FIFO does not wait for a
    writer), then checked on the open descriptor (no race with a swap of the path). FileNotFoundError when there is
    nothing there, :class:`NotRegularFile` when it is not a regular file, another OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # (before fdopen, which refuses a directory with an error of its own)
            raise NotRegularFile(path, KINDS.get(stat.S_IFMT(mode), "not a file"))
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (:func:`open_regular`); ValueError when it holds more than
    ``limit`` bytes."""
    with open_regular(path) as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise ValueError(f"{path}: larger than {limit} bytes")
    return data


def input_files(raw: dict[str, Any]) -> dict[str, list[str]]:
    """Each config key of ``raw`` (a composed config) that names a file the run reads: its files, absolute (a
    relative path is read from the current directory, as the run reads it)."""
    system = raw.get("system")
    trace = system.get("trace") if isinstance(system, dict) and system.get("devices") == "trace" else None
    if not isinstance(trace, str) or not trace:
        return {}
    path = Path(os.path.abspath(trace))
    companion = behaviour_file(path)
    return {"system.trace": [str(path), *([str(companion)] if companion is not None else [])]}


def digest(path: str) -> str | None:
    """The SHA-256 of the file at ``path``; None when there is none. A path that is not a regular file or cannot
    be read is its own marker (``unreadable: ...``): it equals no file's digest."""
    h = hashlib.sha256()
    try:
        with open_regular(Path(path)) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"unreadable: {e.strerror or e}"
    return h.hexdigest()


Files = dict[str, list[tuple[str, str | None]]]  # key -> its files, in the order it names them, with their digests


def digests(raw: dict[str, Any]) -> Files:
    """key -> [(file, :func:`digest`)] of every file :func:`input_files` names."""
    return {key: [(f, digest(f)) for f in files] for key, files in input_files(raw).items()}


def record_inputs(rd: RunDir, raw: dict[str, Any]) -> None:
    """Write the digests of the run's input files into ``rd`` (nothing when the config names none)."""
    files = digests(raw)
    if files:
        listed = {key: [{"path": f, "sha256": d} for f, d in pairs] for key, pairs in files.items()}
        write_json(rd.inputs_file, {"format": INPUTS_FORMAT, "files": listed})


def recorded_inputs(rd: RunDir) -> Files | None:
    """The digests the run recorded when it started; None when it recorded none (no input file, or a run of a
    fedrun before the record). A record fedrun cannot read is refused naming it."""
    path = rd.inputs_file
    if not os.path.lexists(path):
        return None
    try:
        data = json.loads(read_regular(path, RECORD_LIMIT))
        if data.get("format") != INPUTS_FORMAT or not isinstance(data.get("files"), dict):
            raise ValueError(f"not a record of format {INPUTS_FORMAT}")
        files = {str(key): [(str(e["path"]), e["sha256"]) for e in entries] for key, entries in data["files"].items()}
        if not all(d is None or isinstance(d, str) for pairs in files.values() for _, d in pairs):
            raise ValueError("a digest that is not a string")
        return files
    except (OSError, ValueError, AttributeError, TypeError, KeyError) as e:
        why = " ".join(str(e).split())[:160] or type(e).__name__
        raise ConfigError(
            "resume",
            f"{path}: unreadable record of the files the run read ({type(e).__name__}: {why}); valid: the file as"
            " the run wrote it, or remove it to continue on the files as they are now",
        ) from None


def check_inputs(rd: RunDir, raw: dict[str, Any], goes_on: bool) -> None:
    """Before the run in ``rd`` is continued, skipped or extended: refuse (one line naming the key and the file)
    when a file it reads differs in content from the one it started with (a relative path read from another
    directory is the same file when its content is). ``goes_on``: the run will train (a resume or an extension),
    so a run without a record (of a fedrun before it) gets one now."""
    old = recorded_inputs(rd)
    if old is None:
        if goes_on:
            record_inputs(rd, raw)
        return
    now = digests(raw)
    for key in sorted(set(old) | set(now)):
        before, after = old.get(key, []), now.get(key, [])
        for i in range(max(len(before), len(after))):
            path, was = before[i] if i < len(before) else ("", None)
            new, digest_now = after[i] if i < len(after) else (path, None)
            if digest_now != was:
                where = new if new == path or not path else f"{new} (the run read {path})"
                raise ConfigError(
                    key,
                    f"{where} {_change(was, digest_now)} since the run in {rd.path} started; valid: the file as it"
                    f" was (the run's rounds so far ran on it), or a new run dir to run on this {key}",
                )


def _change(was: str | None, now: str | None) -> str:
    if now is None:
        return "is gone"
    if was is None:
        return "appeared"
    if now.startswith("unreadable"):
        return f"became {now}"
    return f"changed (sha256 {was[:12]}... -> {now[:12]}...)"
