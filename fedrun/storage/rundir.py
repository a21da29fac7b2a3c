"""A run directory, the one reader and writer of its layout.

A run directory holds ``config.yaml`` (the composed config, written when the run starts), ``summary.json``
(what the run is, and how it ended), ``metrics.csv``, the checkpoint, ``fedrun.log``, the lock
``.fedrun.lock``, temp files of atomic writes (``.<name>.<pid>.tmp``), for a run refused on bad input
``error.txt`` (beside Hydra's record of the job, ``.hydra/``), and for a run that reads files named in its config
(``system.trace``) their digests, ``input_digests.json`` (fedrun/storage/inputs.py). Every other module reads
and writes these through :class:`RunDir`; summary.json is read into a :class:`Summary`.

summary.json carries its format (``"format": 1``); one without it is format 0 (written before the field
existed) and reads the same, so old run directories still resume and report. One of a newer format is refused
in one line.

The contract of a run directory (tests/storage/test_rundir.py, tests/cli/test_run_dir_contract.py):

- fedrun deletes only files it wrote in this attempt (what appeared while it held the directory's lock, and Hydra's
  record of the job in a foreign directory): a directory that is not empty and holds no fedrun run is refused
  (:meth:`RunDir.foreign`) and left as it was, and one whose lock another process holds is not touched at all;
- only the process that started or resumed a run (:attr:`RunDir.started`) writes its status;
- fedrun never writes through a symlink that leaves the run directory (:meth:`RunDir.check_links`);
- only fedrun's own temp files are ever cleaned up (:data:`fedrun.storage.atomic.TEMP_NAME`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import load_yaml
from fedrun.storage import kept_records
from fedrun.storage.atomic import TEMP_NAME, atomic_write, write_json, write_metrics
from fedrun.storage.lock import LOCK_FILE, RunDirBusy, run_dir_lock
from fedrun.storage.status import Status
from fedrun.storage.summary import SUMMARY_FORMAT as SUMMARY_FORMAT
from fedrun.storage.summary import Summary as Summary
from fedrun.storage.summary import UnreadableRunFile as UnreadableRunFile

CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.csv"
CHECKPOINT_FILE = "checkpoint.pt"
LOG_FILE = "fedrun.log"
# the ``extra`` attribute that carries an evaluated round's row on its log record (fedrun/run/recorder.py): a
# sweep's live table (fedrun/report/sweep_console.py) follows the running job's round and accuracy by it
ROW_RECORD = "fedrun_row"
ERROR_FILE = "error.txt"  # a run refused on bad input: the one line, for fedrun-report
ERROR_LOG = "error.log"  # a run that failed: the traceback
HYDRA_DIR = ".hydra"  # Hydra's record of the job (hydra.output_subdir)
HYDRA_CONFIG = "config.yaml"  # in HYDRA_DIR: the job's composed config
HYDRA_OVERRIDES = "overrides.yaml"  # in HYDRA_DIR: the job's command-line overrides
ACCURACY_PLOT = "accuracy.png"  # test (and train) accuracy against the round (output.plots)
PARTITION_FILE = "partition.csv"  # samples per client and class
PARTITION_PLOT = "partition.png"  # its heatmap (output.plots)
PARTITION_DOMAINS_FILE = "partition_domains.csv"  # samples per client and domain (a dataset with domains)
CLIENT_WEIGHTS_FILE = "client_weights.csv"  # each cohort client's weight per round (eval.client_weights)
CLIENTS_FILE = "clients.csv"  # each client's local test accuracies per evaluated round (eval.local_test)
TRACKING_FILE = "tracking.json"  # the trackers' run ids and last logged rounds (fedrun/storage/trackers/)
TB_DIR = "tb"  # TensorBoard's event files (tracking.tensorboard)
INPUTS_FILE = "input_digests.json"  # the SHA-256 of each file the run reads by path (fedrun/storage/inputs.py)
HYDRA_RECORD_FILES = (HYDRA_CONFIG, "hydra.yaml", HYDRA_OVERRIDES)  # what Hydra writes into HYDRA_DIR
# files whose presence makes a directory a fedrun run's (one it may continue, skip or refuse to overwrite)
RUN_MARKERS = (
    CONFIG_FILE, SUMMARY_FILE, METRICS_FILE, CHECKPOINT_FILE, LOG_FILE, LOCK_FILE, ERROR_FILE, ERROR_LOG, INPUTS_FILE,
)  # fmt: skip
# files only a run directory holds (config.yaml and fedrun.log alone are too common a name in a project folder):
# a folder holding one of them is a run's, where fedrun-report never writes
OWN_FILES = (SUMMARY_FILE, METRICS_FILE, CHECKPOINT_FILE, ERROR_FILE, LOCK_FILE)
# what fedrun (or Hydra for it) writes other than atomically, so a symlink there would be written through
WRITTEN_IN_PLACE = (HYDRA_DIR, LOG_FILE, LOCK_FILE)
# the files fedrun writes into a run directory (a directory by one of these names is in the way)
FILES = (
    CONFIG_FILE, SUMMARY_FILE, METRICS_FILE, CHECKPOINT_FILE, LOG_FILE, LOCK_FILE, ERROR_FILE, ERROR_LOG, INPUTS_FILE,
)  # fmt: skip


class NotAConfig(UnreadableRunFile):
    """A config.yaml that reads as YAML but is not a mapping of config keys."""


def _short(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


class RunDir:
    """One run directory: its files' paths, typed readers and writers, its lock, and what this attempt wrote.

    What this attempt wrote is what appeared while it held the directory's lock (:meth:`lock`; no other fedrun
    process writes then), and Hydra's record of the job, ``record`` (``.hydra``: written for this attempt before it
    began, when Hydra launched the job; None when Hydra wrote none). :attr:`started` is set by :meth:`start`, when
    this process starts or resumes the run; from then on (and only then) it writes the run's status.
    """

    def __init__(self, path: Path | str, record: str | None = None) -> None:
        self.path = Path(path)
        self.record = record
        self.started = False
        self.before = self._listing()  # what the directory held before this attempt wrote into it (None: no dir)
        self._held = False  # this attempt holds the lock
        self._made_lock = False  # ...and made the lock file for it

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    def _listing(self) -> frozenset[str] | None:
        return frozenset(c.name for c in self.path.iterdir()) if self.path.is_dir() else None

    # -- paths
    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def checkpoint_file(self) -> Path:
        return self.path / CHECKPOINT_FILE

    @property
    def log_file(self) -> Path:
        return self.path / LOG_FILE

    @property
    def error_file(self) -> Path:
        return self.path / ERROR_FILE

    @property
    def error_log(self) -> Path:
        return self.path / ERROR_LOG

    @property
    def hydra_dir(self) -> Path:
        return self.path / HYDRA_DIR

    @property
    def hydra_config_file(self) -> Path:
        return self.path / HYDRA_DIR / HYDRA_CONFIG

    @property
    def hydra_overrides_file(self) -> Path:
        return self.path / HYDRA_DIR / HYDRA_OVERRIDES

    @property
    def accuracy_plot(self) -> Path:
        return self.path / ACCURACY_PLOT

    @property
    def partition_file(self) -> Path:
        return self.path / PARTITION_FILE

    @property
    def partition_plot(self) -> Path:
        return self.path / PARTITION_PLOT

    @property
    def partition_domains_file(self) -> Path:
        return self.path / PARTITION_DOMAINS_FILE

    @property
    def client_weights_file(self) -> Path:
        return self.path / CLIENT_WEIGHTS_FILE

    @property
    def clients_file(self) -> Path:
        return self.path / CLIENTS_FILE

    @property
    def tracking_file(self) -> Path:
        return self.path / TRACKING_FILE

    @property
    def tb_dir(self) -> Path:
        return self.path / TB_DIR

    @property
    def inputs_file(self) -> Path:
        return self.path / INPUTS_FILE

    # -- readers
    def read_summary(self) -> Summary | None:
        """summary.json (None when there is none); :class:`UnreadableRunFile` when it cannot be read."""
        f = self.summary_file
        if not f.is_file():
            return None
        try:
            text = f.read_text()
            return Summary.parse(text)
        except (OSError, UnicodeDecodeError, UnreadableRunFile) as e:
            raise UnreadableRunFile(f"{SUMMARY_FILE}: {_short(e)}") from None

    def summary(self) -> Summary | None:
        """summary.json, or None when there is none or it cannot be read."""
        try:
            return self.read_summary()
        except UnreadableRunFile:
            return None

    def status(self) -> Status | None:
        """The run's status from summary.json (None when there is none, or it cannot be read)."""
        s = self.summary()
        return s.status if s else None

    def read_config(self, hydra_record: bool = False, plain: bool = True) -> dict[str, Any] | None:
        """config.yaml (with ``hydra_record``, else Hydra's ``.hydra/config.yaml``, the config of a job refused before
        it wrote one), parsed as ``yaml.safe_load`` does (not ``plain``: as OmegaConf does, e.g. ``1e-3`` a float, for
        a config to run again); None when there is none, :class:`UnreadableRunFile` when it cannot be read (a YAML
        mapping of something else: :class:`NotAConfig`). The one reader of a run's config.yaml."""
        for f in (self.config_file, self.hydra_config_file) if hydra_record else (self.config_file,):
            if f.is_file():
                try:
                    cfg = load_yaml(f.read_text(), str(f), plain=plain)
                except ConfigError as e:  # a YAML bomb or malformed YAML (safe_yaml)
                    raise UnreadableRunFile(f"{f.name}: {e.message}") from None
                except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
                    raise UnreadableRunFile(f"{f.name}: {_short(e)}") from None
                if not isinstance(cfg, dict):
                    raise NotAConfig(f"{f.name}: not a mapping of config keys")
                return cfg
        return None

    def holds_run(self) -> bool:
        """Whether an earlier run (or a refused one) left its files here."""
        return any((self.path / name).exists() for name in RUN_MARKERS)

    def foreign(self) -> bool:
        """Not empty before this attempt, and holding no fedrun run: not a directory fedrun may write into."""
        if not self.before:
            return False
        ours = {n for n in self.before if n in RUN_MARKERS or TEMP_NAME.match(n)}
        return not ours and bool(self.before - {HYDRA_DIR})

    def check_links(self, key: str = "hydra.run.dir") -> None:
        """Refuse (ConfigError naming ``key``) a symlink among what is written in place (``.hydra/``, fedrun.log,
        the lock) that leads outside the run directory: fedrun would write through it; and a directory where
        fedrun writes a file (a folder named ``checkpoint.pt``): the run would start, then fail at that write."""
        root = self.path.resolve()
        for name in WRITTEN_IN_PLACE:
            p = self.path / name
            if p.is_symlink() and not _inside(Path(os.path.realpath(p)), root):  # realpath: a loop does not raise
                raise ConfigError(
                    key,
                    f"{p} is a symlink to {os.readlink(p)}, outside the run dir, and fedrun never writes through one;"
                    " valid: a run dir without it",
                )
        for name in FILES:
            p = self.path / name
            if p.is_dir() and not p.is_symlink():  # a link inside the run dir is the user's business
                raise ConfigError(
                    key,
                    f"{p} is a directory where fedrun writes its {name} file, so the run could not save it;"
                    " valid: a run dir without it (move the directory away)",
                )

    # -- writers
    def start(self, config_yaml: str) -> None:
        """This process starts (or resumes) the run: config.yaml is written and the run's status is its to write."""
        atomic_write(self.config_file, config_yaml)
        self.started = True

    def write_summary(self, summary: Summary | Mapping[str, Any]) -> None:
        """summary.json, atomically, in the current format (a :class:`Summary`, or the fields of one)."""
        write_json(self.summary_file, (summary if isinstance(summary, Summary) else Summary(0, summary)).to_json())

    def write_metrics(self, rows: list[dict[str, Any]]) -> None:
        write_metrics(self.metrics_file, rows)

    def write_error_log(self, text: str) -> None:
        atomic_write(self.error_log, text)

    def set_status(self, status: Status | str, error: str, only_running: bool = False) -> None:
        """Set ``status`` and ``error`` in summary.json, keeping what it says of the run (with ``only_running``:
        only when it says ``running``); nothing unless this process started the run (:meth:`start`), and silently
        nothing when summary.json cannot be read or written."""
        if not self.started:
            return
        old = self.summary()
        if only_running and (old is None or old.status is not Status.RUNNING):
            return
        with contextlib.suppress(OSError):
            self.write_summary((old or Summary(SUMMARY_FORMAT)).replace(status=status, error=error))

    def refuse(self, message: str) -> None:
        """Bad input: remove what this attempt wrote (but keep Hydra's record of a job in a new directory:
        fedrun-report labels the refused run from it; in one that held a run, that run's record is put back,
        :meth:`restore_record`) and, when the directory holds no run, say why in
        error.txt. Only under the directory's lock (taken here for the purpose when this attempt does not hold it,
        and then nothing but error.txt is written): a directory another process holds is left as it is, and one that
        held anything before this attempt keeps it byte for byte. A foreign directory gets no lock and no error.txt;
        only Hydra's record of this attempt leaves it."""
        if not self.path.is_dir():
            return
        if self.foreign():
            self._remove_record()
            return
        self.restore_record()
        if self._held:
            self._refuse_held(message)
            return
        with contextlib.suppress(RunDirBusy), self.lock():
            self._refuse_held(message)

    def keep_record(self, record: str | None) -> None:
        """Before Hydra writes its record of a job (folder ``record``) here: keep the record of the run this
        directory holds, for :meth:`restore_record` (fedrun/storage/kept_records.py); nothing when it holds none."""
        if record is None:
            return
        if self.before and any(n in RUN_MARKERS for n in self.before):
            kept_records.keep(self.path / record, HYDRA_RECORD_FILES)
        else:  # what an earlier composition kept here is no longer this directory's
            kept_records.forget(self.path / record)

    def restore_record(self) -> None:
        """Put back the record :meth:`keep_record` kept, over the one Hydra wrote for this refused attempt."""
        if self.record is not None:
            kept_records.restore(self.path / self.record)

    def _refuse_held(self, message: str) -> None:
        before = self.before or frozenset()
        record = Path(os.path.normpath(self.record)).parts[0] if self.record else None
        for child in self.path.iterdir():
            if child.name in before or child.name in (record, LOCK_FILE):
                continue
            with contextlib.suppress(OSError):
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        if not self.config_file.exists() and not self.summary_file.exists():
            atomic_write(self.error_file, message + "\n")
        if self._made_lock:  # this attempt's own, and held: no other process can be waiting on it
            with contextlib.suppress(OSError):
                (self.path / LOCK_FILE).unlink()

    def _remove_record(self) -> None:
        """Hydra's record of this attempt (``record``: the three files Hydra writes, then its folder if empty)."""
        if self.record is None:
            return
        folder = self.path / self.record
        if not _inside(Path(os.path.realpath(folder)), self.path.resolve()):
            return
        for name in HYDRA_RECORD_FILES:
            with contextlib.suppress(OSError):
                (folder / name).unlink()
        while folder != self.path and _inside(folder, self.path):  # its folders, when this left them empty
            with contextlib.suppress(OSError):
                folder.rmdir()
            folder = folder.parent

    @contextlib.contextmanager
    def lock(self, wait: Callable[[int], None] | None = None) -> Iterator[None]:
        """This run directory's lock (fedrun/storage/lock.py) for the ``with`` block: from when it is taken, what
        appears in the directory is this attempt's. ``wait``: wait for a lock another process holds (a sweep's job;
        ``wait(pid)`` says so) instead of :class:`RunDirBusy`."""
        with run_dir_lock(self.path, wait) as made:
            self.before, self._held, self._made_lock = self._listing(), True, made
            try:
                yield
            finally:
                self._held = self._made_lock = False
