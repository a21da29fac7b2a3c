"""Where fedrun-report's files go, for every subcommand (tables, scorecards, curves, heatmaps, landscapes).

``--out PATH`` (its folder is made when missing; an existing folder gets the default file name), else ``reports/``
in the common parent of the run directories (beside the runs, never inside one), else, when that cannot be written
(a read-only archive), ``reports/`` in the current directory. ``--out`` inside a run directory is refused. An
existing report is never overwritten: the next free ``NAME_2``, ``NAME_3``... is used, unless ``force``. A folder
is a run directory when it holds one of :data:`~fedrun.storage.rundir.OWN_FILES`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from fedrun.core.errors import DataError
from fedrun.storage.atomic import atomic_write
from fedrun.storage.rundir import OWN_FILES


class OutputUnwritable(Exception):
    """No report file could be written: the message is the one line naming the path and why."""


def inside_run(path: Path) -> Path | None:
    """The run directory that ``path`` (or an ancestor of it) is, if any."""
    p = Path(os.path.abspath(path))
    for d in (p, *p.parents):
        if any(os.path.isfile(d / name) for name in OWN_FILES):  # False, never an error, when unreadable
            return d
    return None


def bad_out(out: Path | None) -> str | None:
    """Why ``--out`` cannot be used (it lies inside a run directory); None when it can."""
    run = inside_run(out if out.is_dir() else out.parent) if out is not None else None
    if run is None:
        return None
    return f"--out: {out} is inside the run dir {run}; valid: a path outside every run dir"


def folders_beside(parents: list[Path]) -> list[Path]:
    """Where reports go without ``--out``, in order of preference: ``reports/`` in the common parent of ``parents``
    (moved above any run directory holding it), then ``reports/`` in the current directory (unless that lies inside
    a run directory)."""
    parent = Path(os.path.commonpath([os.path.abspath(p) for p in parents]))
    while (inside := inside_run(parent)) is not None:
        parent = inside.parent
    folders = [parent / "reports"]
    cwd = Path.cwd() / "reports"
    if inside_run(Path.cwd()) is None and cwd not in folders:
        folders.append(cwd)
    return folders


def runs_folders(runs: list[str]) -> list[Path]:
    """:func:`folders_beside` the run directories ``runs``."""
    return folders_beside([Path(os.path.dirname(os.path.abspath(r))) for r in runs])


def sources_folders(sources: list[Path]) -> list[Path]:
    """:func:`folders_beside` the directories (or checkpoint files) given on the command line: the folder holding
    each run (a run given, or the run a file lies in), or the folder given (a sweep, whose runs are below it)."""
    parents = [run.parent if (run := inside_run(p)) is not None else Path(os.path.abspath(p)) for p in sources]
    return folders_beside(parents)


def out_prefix(out: Path, name: str, suffixes: tuple[str, ...]) -> Path:
    """The file prefix that ``--out`` names: ``out/name`` for an existing folder, else ``out`` without the suffix it
    was given with (``--out fig.png`` -> ``fig``)."""
    if out.is_dir():
        return Path(os.path.abspath(out)) / name
    path = Path(os.path.abspath(out))
    for suffix in suffixes:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.with_name(path.name[: -len(suffix)])
    return path


def claim(prefix: Path, suffixes: tuple[str, ...], force: bool) -> Path:
    """``prefix``, or with ``force`` unset and a file of it existing, the first free ``prefix_2``, ``prefix_3``...:
    its first file is created exclusively, so two reports at once never share it. Raises OSError."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    if force:
        return prefix
    n = 1
    while True:
        p = prefix if n == 1 else prefix.with_name(f"{prefix.name}_{n}")
        if not any(p.with_name(p.name + s).exists() or p.with_name(p.name + s).is_symlink() for s in suffixes):
            try:
                os.close(os.open(p.with_name(p.name + suffixes[0]), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                return p
            except FileExistsError:
                pass
        n += 1


def _candidates(out: Path | None, folders: list[Path], name: str, suffixes: tuple[str, ...]) -> list[Path]:
    return [out_prefix(out, name, suffixes)] if out is not None else [f / name for f in folders]


def _failure(e: OSError, prefix: Path) -> str:
    return f"{getattr(e, 'filename', None) or prefix.parent}: {e.strerror or why(e)}"


def _unwritable(out: Path | None, failures: list[str]) -> OutputUnwritable:
    hint = "" if out is not None else " (give --out)"
    return OutputUnwritable(f"fedrun-report: cannot write the report: {'; '.join(failures)}{hint}")


def write_report(
    out: Path | None, force: bool, runs: list[str], name: str, files: dict[str, str]
) -> tuple[Path, list[str]]:
    """Write ``files`` (suffix -> text) as ``PREFIX.suffix`` where the module says, beside the run directories
    ``runs``; returns (the prefix, notes for stderr). Raises :class:`OutputUnwritable` when no place can be
    written; nothing is left half-written."""
    suffixes = tuple(files)
    notes: list[str] = []
    failures: list[str] = []
    for prefix in _candidates(out, [] if out is not None else runs_folders(runs), name, suffixes):
        written: list[Path] = []
        try:
            claimed = claim(prefix, suffixes, force)
            written.append(claimed.with_name(claimed.name + suffixes[0]))
            for suffix, text in files.items():
                atomic_write(claimed.with_name(claimed.name + suffix), text)
                written.append(claimed.with_name(claimed.name + suffix))
        except OSError as e:
            failures.append(_failure(e, prefix))
            for f in [] if force else written:  # nothing half-written; --force had overwritten anyway
                with contextlib.suppress(OSError):
                    f.unlink()
            continue
        return claimed, notes + _placement_notes(failures, prefix, claimed, suffixes, "wrote", "wrote to")
    raise _unwritable(out, failures)


def _placement_notes(
    failures: list[str], prefix: Path, claimed: Path, suffixes: tuple[str, ...], verb: str, verb_to: str
) -> list[str]:
    """Why a report's files are not where asked: the first place that could not be written, a name taken."""
    notes = [f"fedrun-report: cannot write {failures[0]}; {verb_to} {claimed.parent} instead"] if failures else []
    if claimed != prefix:
        notes.append(f"fedrun-report: {prefix.name}{suffixes[0]} exists; {verb} {claimed.name}.* (--force overwrites)")
    return notes


def claim_figure(
    out: Path | None, sources: list[Path], name: str, suffixes: tuple[str, ...], force: bool
) -> tuple[Path, list[str]]:
    """The prefix of a figure's files (``PREFIX.png`` and its ``suffixes``) where the module says, its first file
    created (empty) so that no other report takes it; and notes for stderr. Raises :class:`OutputUnwritable` when
    no place can be written."""
    failures: list[str] = []
    for prefix in _candidates(out, [] if out is not None else sources_folders(sources), name, suffixes):
        try:
            claimed = claim(prefix, suffixes, force)
        except OSError as e:
            failures.append(_failure(e, prefix))
            continue
        return claimed, _placement_notes(failures, prefix, claimed, suffixes, "writing", "writing to")
    raise _unwritable(out, failures)


def draw(
    out: Path | None, sources: list[Path], name: str, suffixes: tuple[str, ...], force: bool, run: Callable[[Path], int]
) -> int:
    """Claim a figure's files (:func:`claim_figure`), then ``run(prefix)`` writes them; its exit code. Nothing is left
    behind when it fails (the claimed file is removed while still empty); bad input (DataError) is one line, exit 2;
    a file that cannot be written is one line naming it, exit 1."""
    try:
        prefix, notes = claim_figure(out, sources, name, suffixes, force)
    except OutputUnwritable as e:
        print(str(e), file=sys.stderr)
        return 1
    for note in notes:
        print(note, file=sys.stderr)
    first = prefix.with_name(prefix.name + suffixes[0])
    code = 1
    try:
        code = run(prefix)
    except DataError as e:
        print(f"fedrun-report: error: {e}", file=sys.stderr)
        code = 2
    except OSError as e:
        print(f"fedrun-report: cannot write {_failure(e, prefix)}", file=sys.stderr)
    finally:
        if code != 0 and not force:
            with contextlib.suppress(OSError):
                if first.is_file() and first.stat().st_size == 0:
                    first.unlink()
    return code


def why(e: BaseException) -> str:
    """An exception's message on one line (at most 200 characters), or its type's name."""
    return " ".join(str(e).split())[:200] or type(e).__name__
