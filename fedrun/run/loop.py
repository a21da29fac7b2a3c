"""The round loop: sample cohort -> engine trains -> algorithm aggregates -> evaluate -> log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from rich.console import Console

from fedrun.config.identity import fingerprint
from fedrun.config.schema import RunSpec
from fedrun.core.errors import DivergenceError
from fedrun.host.interrupts import deferred, signal_name
from fedrun.metrics.clients import ClientAccuracy
from fedrun.metrics.personal import CLIENTS_FILE, LocalEvaluation, resume_clients_csv
from fedrun.run.async_rounds import is_async, is_eval_update, train_update
from fedrun.run.experiment import Experiment, build_experiment, earlier_engine_and_threads
from fedrun.run.recorder import RoundMonitor, log
from fedrun.run.rounds import evaluation_row, lr_at, train_round
from fedrun.run.state import (
    FinishedRound,
    RunState,
    StagedClientStates,
    finished_round,
    open_state,
    rewind,
    save_state,
)
from fedrun.run.summary import Outcome, describe_run, final_summary, summary_line
from fedrun.storage.figures import plot_curves
from fedrun.storage.rundir import RunDir
from fedrun.storage.status import Status
from fedrun.storage.tracking import check_trackers

__all__ = ["lr_at", "run"]


def run(
    spec: RunSpec, run_dir: Path | RunDir, console: Console | None = None, announce: bool = False
) -> dict[str, Any]:
    """Run one experiment, writing metrics.csv, summary.json, partition and curve files to ``run_dir``.

    When ``run_dir`` holds a checkpoint of this config the run continues from it; the metrics it then
    writes are identical (timings aside) to those of an uninterrupted run. Given a :class:`RunDir` (the CLI's),
    the run starts (:meth:`RunDir.start`: config.yaml, and the status is this process's to write) once the
    experiment is built, so that nothing that fails before touches the directory. ``announce``: a resumed run
    says on ``console`` (stderr) after which round it goes on.
    """
    t0 = time.perf_counter()
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    check_trackers(spec.tracking)  # a tracker server that does not answer: refused in seconds, nothing written
    experiment = build_experiment(spec, *earlier_engine_and_threads(rd.path))
    try:
        # the checkpoint is read and checked before config.yaml is written: a refused extension (an unreadable
        # checkpoint) leaves the completed run's config saying the rounds it ran
        state = open_state(experiment, rd.path)
        # the trackers open before config.yaml and the status are written: a refused one (a file where its folder
        # goes) leaves a completed run that was to be extended saying what it was
        monitor = RoundMonitor(spec, rd.path, state, console or Console(stderr=True))
        try:
            if isinstance(run_dir, RunDir):
                rd.start(OmegaConf.to_yaml(spec.raw))
            if announce and state.start:
                line = f"fedrun: {rd.path}: {progress_words(spec, state.start)}"
                monitor.progress.console.print(line, highlight=False, soft_wrap=True)
            return _run(spec, rd, experiment, state, t0, monitor)
        except BaseException:
            monitor.trackers.close()  # (again, where the loop closed them: closing is idempotent)
            raise
    finally:
        experiment.engine.close()  # Ray actors (and a cluster the engine started) end with the run, however it ends


def _run(
    spec: RunSpec, rd: RunDir, experiment: Experiment, state: RunState, t0: float, monitor: RoundMonitor
) -> dict[str, Any]:
    """The round loop of :func:`run` on a built experiment: restore, train and aggregate each round, evaluate,
    checkpoint, summarise."""
    run_dir = rd.path
    info = describe_run(experiment, run_dir)
    fp = fingerprint(spec.raw)
    t0 -= state.elapsed  # timings continue from where a killed run stopped
    rd.write_summary({**info, "status": Status.RUNNING})
    log.info(start_line(spec, info, state.start))
    outcome, client_acc = Outcome(), client_accuracy(experiment)
    local_eval = local_evaluation(experiment, run_dir, state.start)
    t_loop = time.perf_counter()
    # a round's client-state writes wait until it has finished; ``last``: the state an interrupted run saves
    state.clients = staged = StagedClientStates(state.clients)
    last, saved = finished_round(state, experiment, state.start), state.start
    try:
        with monitor:
            for rnd in range(state.start, spec.fl.rounds):
                step = train_update if is_async(experiment) else train_round  # an async server's update, or a round
                result = step(experiment, state, rnd)
                monitor.weights(result.weight_rows)
                if is_eval_update(experiment, state, rnd):
                    monitor.record(evaluation_row(experiment, state, result, t0, client_acc, local_eval))
                monitor.advance()
                with deferred():  # the round has finished: it becomes the state an interrupted run saves
                    staged.commit()
                    last = finished_round(state, experiment, rnd + 1)
                if checkpoint_due(spec, rnd):
                    save_state(state, experiment, run_dir, rnd + 1, fp, t0)
                    saved = rnd + 1
        if not spec.checkpoint.keep_final:
            rd.checkpoint_file.unlink(missing_ok=True)
    except DivergenceError as e:
        # rounds are 1-based in metrics.csv and summary.json; the last good checkpoint stays in place
        where = f"round {e.round_idx + 1}" + (f", client {e.client}" if e.client is not None else "")
        extra: dict[str, Any] = {"diverged_round": e.round_idx + 1, "diverged_client": e.client}
        outcome = Outcome(Status.DIVERGED, f"diverged at {where}: {e.what}", extra)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP (fedrun/host/interrupts.py)
        save_interrupted(state, experiment, rd, last, saved, fp, t0)
        extra = {"signal": signal_name(e), "checkpoint_round": last.done}
        outcome = Outcome(Status.INTERRUPTED, f"interrupted by {signal_name(e)}", extra)
    if state.rows and spec.output.plots:  # before summary.json says how the run ended
        plot_curves(state.rows, rd.accuracy_plot, f"{spec.algorithm.name} on {spec.data.name}")
    summary = final_summary(info, state, spec, outcome, t0, t_loop, run_dir)
    rd.write_summary(summary)
    monitor.finish(summary)
    log.info(summary_line(summary))
    return summary


def save_interrupted(
    state: RunState, experiment: Experiment, rd: RunDir, last: FinishedRound, saved: int, fp: str, t0: float
) -> None:
    """An interrupted run: its state goes back to the last finished round (``last``), which is checkpointed unless
    the checkpoint on disk already holds it (``saved`` rounds). The write is atomic: a second signal during it
    ends the process with the earlier checkpoint whole."""
    rewind(state, experiment, last, rd.path)
    if last.done > saved:
        save_state(state, experiment, rd.path, last.done, fp, t0)


def progress_words(spec: RunSpec, start: int) -> str:
    """Where a run begins: ``resuming after round 17 of 50`` (or ``starting: 50 rounds``)."""
    return f"resuming after round {start} of {spec.fl.rounds}" if start else f"starting: {spec.fl.rounds} rounds"


def start_line(spec: RunSpec, info: dict[str, Any], start: int) -> str:
    """The log line of a run's start: what runs, where, from which round."""
    what = f"{info['algorithm']} on {info['data']} ({info['model']}, {info['partition']}), seed {info['seed']}"
    how = f"engine {info['engine']}, {info.get('threads', '?')} thread(s), {info['device']}"
    begin = f"resumed after round {start} of {spec.fl.rounds}" if start else f"started: {spec.fl.rounds} rounds"
    return f"{begin}: {what}; {how}"


def client_accuracy(experiment: Experiment) -> ClientAccuracy | None:
    """The per-client accuracy evaluator of ``eval.client_acc`` (None when off)."""
    ev = experiment.spec.eval
    if not ev.client_acc:
        return None
    return ClientAccuracy.build(experiment.model, experiment.fed, experiment.parts, ev.client_acc_split, ev.batch_size)


def local_evaluation(experiment: Experiment, run_dir: Path | None, start: int) -> LocalEvaluation | None:
    """The per-client evaluator of ``eval.local_test`` (None when off); clients.csv cut back to round ``start``."""
    ev, local = experiment.spec.eval, experiment.local_test
    if local is None:
        return None
    csv = run_dir / CLIENTS_FILE if run_dir is not None else None
    if csv is not None:
        resume_clients_csv(csv, start)
    fl, seed = experiment.spec.fl, experiment.spec.seed
    finetune = (ev.finetune_steps, ev.finetune_lr, fl.batch_size, ev.finetune_epochs, ev.finetune_momentum)
    out = LocalEvaluation(experiment.model, experiment.fed, local, ev.batch_size, finetune, seed, csv)
    if experiment.unseen is not None:
        unseen = experiment.unseen
        out.unseen = LocalEvaluation(experiment.model, experiment.fed, unseen.local_test, ev.batch_size, finetune, seed,
                                     train_parts=unseen.train_parts)  # fmt: skip
        out.unseen.first_id = experiment.spec.fl.clients
    return out


def checkpoint_due(spec: RunSpec, rnd: int) -> bool:
    """Whether the run state is saved after round ``rnd`` (0-based): every ``checkpoint.every`` rounds, and
    after the last one when the final checkpoint is kept."""
    every = spec.checkpoint.every
    return bool(every and (rnd + 1) % every == 0) or (rnd == spec.fl.rounds - 1 and spec.checkpoint.keep_final)
