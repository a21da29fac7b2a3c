"""A fork server for the documentation's command test (tests/docs/test_doc_commands.py): each ``fedrun``,
``fedrun-report`` and ``fedrun-reproduce`` a page's line starts is still a process of its own, forked from one that
imported fedrun, torch and Hydra once (one server per test worker serves its pages), instead of a fresh interpreter
that imports them again (seconds each).

The page's shims (``fedrun``...) are clients: :func:`client` sends the command's arguments, working directory,
environment and ``sys.path`` and passes its stdin, stdout and stderr (``SCM_RIGHTS``); the server forks, the child
takes those descriptors, directory, environment and path, and runs the command's entry point to the end of the
interpreter (thread joins, atexit handlers, a last collection, flushed std streams: :func:`finish`), and the server
sends its exit status back, which the shim exits with (a child ended by a signal ends its shim by the same signal).
Pipes, redirections and ``$?`` in the page's bash lines see the same process behaviour as before. The server keeps
what it preloaded out of the children's garbage collections (``gc.freeze``) and a child ends without tearing those
modules down: either would write to, and so copy, every memory page the fork shares (~0.6 and ~0.3 CPU s a child).

What a fork could not reproduce sends the shim down the old path (a fresh interpreter, :func:`client` returns
None): an environment that differs from the server's in anything but what bash sets itself (``PWD``, ``SHLVL``...)
and the page's ``HOME`` and ``PATH`` (:data:`PER_PAGE`), or signals inherited as ignored that differ (fedrun reads
those at import: fedrun/host/interrupts.py), or no server.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

# set per command (by bash itself in each line's process; by pytest for each test), read by nothing at import: the
# child gets them as the client has them; the rest of the environment must equal the server's
SHELL_SET = {"PWD", "OLDPWD", "SHLVL", "_", "PYTEST_CURRENT_TEST"}
# set per page by the documentation's test (the page's own HOME; its shims' folder first on PATH), read by nothing
# the server preloads at import (no module keeps a value made from them), so one server serves every page
PER_PAGE = {"HOME", "PATH"}
WATCHED = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
PRELOAD = (
    "fedrun.cli.__main__",
    "fedrun.cli.main",
    "fedrun.cli.help",
    "fedrun.cli.privacy_query",
    "fedrun.cli.report",
    "fedrun.cli.reproduce",
    "tests.docs.shrink",
)
FALLBACK = b"F"
BASE_PATH: list[str] = []


def ignored() -> list[int]:
    """The watched signals this process has as ignored."""
    return sorted(int(s) for s in WATCHED if signal.getsignal(s) == signal.SIG_IGN)


def base_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in SHELL_SET | PER_PAGE}


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("fork server closed the connection")
        buf += chunk
    return buf


def ask(request: dict, sock_path: str, fds: list[int], timeout: float | None = None) -> int | None:
    """Send ``request`` and ``fds`` (the child's stdin, stdout, stderr); the child's exit status (minus the signal
    that ended it), or None where the server declined or is not there."""
    request = {**request, "ignored": ignored()}
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(sock_path)
    except OSError:
        return None
    with sock:
        sock.settimeout(timeout)
        payload = json.dumps(request).encode()
        socket.send_fds(sock, [struct.pack("!I", len(payload)) + payload], fds)
        if recv_exact(sock, 1) == FALLBACK:
            return None
        (status,) = struct.unpack("!i", recv_exact(sock, 4))
    return status


def client(entry: str, args: list[str], extra: dict[str, str], sock_path: str, path: list[str]) -> int | None:
    """A shim's: run ``entry args`` in a child of the server at ``sock_path`` with this process's descriptors,
    directory and environment and ``sys.path`` = ``path`` (the one the command would have had); its exit code, or
    None for the old path."""
    env = dict(os.environ)
    request = {"entry": entry, "args": args, "extra": extra, "cwd": os.getcwd(), "env": env, "path": path}
    status = ask(request, sock_path, [0, 1, 2])
    if status is not None and status < 0:  # ended by a signal: end the same way, so bash sees what it would have seen
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


def forked_run(
    sock_path: str | None, module: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess | None:
    """``subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True)``
    as a child of the server at ``sock_path``; None where it declined (the caller then runs the subprocess)."""
    if sock_path is None:
        return None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        request = {"entry": "module", "args": args, "extra": {"module": module}, "cwd": str(cwd), "env": env}
        status = ask({**request, "path": None}, sock_path, [0, out.fileno(), err.fileno()], timeout)
        if status is None:
            return None
        out.seek(0)
        err.seek(0)
        text = (out.read().decode(errors="replace"), err.read().decode(errors="replace"))
    return subprocess.CompletedProcess([sys.executable, "-m", module, *args], status, *text)


@contextlib.contextmanager
def started(env: dict[str, str], cwd: Path, log: Path, warm: bool = False, lazy: bool = False) -> Iterator[str | None]:
    """A fork server started with ``env`` in ``cwd`` (its output in ``log``), with the default experiment's data read
    before it serves where ``warm`` (:func:`warm_data`) and the lazy imports of system and privacy runs made where
    ``lazy`` (:func:`warm_imports`); its socket, or None when it did not come up (callers then start fresh
    interpreters)."""
    folder = Path(tempfile.mkdtemp(prefix="fedrun-fork-"))  # a short path: a socket's is at most 107 bytes
    sock = folder / "s"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, __file__, str(sock), *(["--warm"] if warm else []), *(["--lazy"] if lazy else [])],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 180
        while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        yield str(sock) if sock.exists() else None
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def child(request: dict, fds: list[int]) -> None:
    """In the forked child: take the client's descriptors, directory, environment and path."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # ``python -m``'s sys.path: the working directory first, then what every interpreter of this environment has
    sys.path[:] = request["path"] if request["path"] is not None else [request["cwd"], *BASE_PATH[1:]]


def warm_data() -> None:
    """Read the default experiment's data (Fashion-MNIST, under the server's ``$FEDRUN_DATA``) into fedrun's
    per-process memo (fedrun/data/memo.py), as a command and as its shrink (tests/docs/shrink.py: stand-in data
    allowed, a key of its own) load it, and import what a run imports when it starts, as the kill table's worker
    does (tests/kill_worker.py): each command on that data forked from here copies it instead of reading and
    checksumming the files again (~0.5 CPU-s a command). A command whose data root or source differs reads its own."""
    import torch

    from tests.conftest import compose_cfg
    from tests.kill_worker import preload

    # on one thread: a parallel region here would start OpenMP's threads, which a forked child cannot use (it hangs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for standin in ("false", "true"):
            preload(compose_cfg([f"data.standin={standin}"]))
    finally:
        torch.set_num_threads(threads)


def warm_imports() -> None:
    """Import what a command imports only on its first use of it, ~1.2 CPU-s a command each (~4 CPU-s here, once):
    what PyTorch's FLOP counter imports on its first count (``torch._dynamo`` and ~800 modules more; every run with
    a system model counts a gradient's FLOPs, fedrun/system/clock.py) and dp-accounting (every private run,
    ``--privacy-noise``). Nothing a command reads is left behind: the count is of ``ones`` (no random number drawn)
    and dropped, and fedrun's own caches (dp-accounting's loader, the budgets: fedrun/privacy/accounting.py) stay
    empty. For a server whose commands use these often (the documentation's pages); others import them anew.

    The environment is put back as it was: ``torch._inductor`` sets ``TORCHINDUCTOR_CACHE_DIR`` to its default on
    import (the server would decline every client, whose environment lacks it; a child that compiles finds the same
    default, as a fresh interpreter does)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    threads, environ = torch.get_num_threads(), dict(os.environ)
    torch.set_num_threads(1)  # as warm_data: no OpenMP threads in the server
    try:
        x = torch.ones(2, 2, requires_grad=True)
        with FlopCounterMode(display=False):
            (x @ x).sum().backward()
    finally:
        torch.set_num_threads(threads)
        os.environ.clear()
        os.environ.update(environ)
    with contextlib.suppress(ImportError):  # the privacy extra: without it, its commands import (and refuse) anew
        import absl.logging  # noqa: F401
        import dp_accounting  # noqa: F401
        from dp_accounting import pld, rdp  # noqa: F401

        import fedrun.privacy.accounting  # noqa: F401


def serve(sock_path: str, warm: bool = False, lazy: bool = False) -> dict:
    """Preload (and :func:`warm_data` where ``warm``, :func:`warm_imports` where ``lazy``), then accept clients until
    killed; returns (with the request) only in a forked child."""
    BASE_PATH[:] = sys.path  # this script's folder first, then PYTHONPATH's, the standard library and site's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    for name in PRELOAD:
        __import__(name)
    if warm:
        warm_data()
    if lazy:
        warm_imports()
    # the preloaded objects out of the collector's sight: a child's collections (and its interpreter's last one, at
    # exit) would otherwise walk them all, writing to every page the fork shares (copy-on-write): ~0.6 CPU s a child
    gc.collect()
    gc.freeze()
    env, sigs = base_env(dict(os.environ)), ignored()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path + ".tmp")
    listener.listen(16)
    os.rename(sock_path + ".tmp", sock_path)  # clients see the socket only once it accepts
    waiting: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener], [], [], 0.05)
        if ready:
            conn, _ = listener.accept()
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            (size,) = struct.unpack("!I", msg[:4])
            body = msg[4:]
            while len(body) < size:
                body += recv_exact(conn, size - len(body))
            request = json.loads(body)
            if base_env(request["env"]) != env or request["ignored"] != sigs or len(fds) != 3:
                print("declined:", request["entry"], request["args"], flush=True)  # in the page's forkserver.log
                conn.sendall(FALLBACK)
                conn.close()
                for fd in fds:
                    os.close(fd)
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                for other in waiting.values():
                    other.close()
                child(request, fds)
                return request
            for fd in fds:  # else a pipe's reader (``fedrun ... | head``) would never see its end
                os.close(fd)
            conn.sendall(b"R")
            waiting[pid] = conn
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            with conn:
                conn.sendall(struct.pack("!i", code))


def run_entry(request: dict) -> None:
    """The command's entry point, as its console script (or the shim, for ``fedrun``) would call it."""
    entry, args = request["entry"], request["args"]
    if entry == "fedrun":
        from tests.docs.shrink import shrunk_argv

        sys.argv = ["fedrun", *shrunk_argv(args, Path(request["extra"]["cache"]))]
        from fedrun.cli.__main__ import main
    elif entry == "fedrun-report":
        sys.argv = [request["extra"]["argv0"], *args]
        from fedrun.cli.report import main
    elif entry == "fedrun-reproduce":
        sys.argv = [request["extra"]["argv0"], *args]
        from fedrun.cli.reproduce import main
    else:  # ``python -m MODULE args``: runpy sets sys.argv[0] to the module's file, as -m does
        import runpy

        sys.argv = ["-m", *args]
        for preloaded in (request["extra"]["module"], request["extra"]["module"] + ".__main__"):  # -m runs it anew
            if getattr(sys.modules.get(preloaded), "__file__", "").endswith("__main__.py"):
                del sys.modules[preloaded]
        runpy._run_module_as_main(request["extra"]["module"])  # type: ignore[attr-defined]
        sys.exit(0)
    sys.exit(main())


def finish(code: object) -> None:
    """End a child whose command exited with ``code`` (``sys.exit``'s argument) as the interpreter would: the status
    it gives ``code``, joins of the threads left, atexit handlers, a last collection, std streams flushed (status 120
    where that fails). Then ``os._exit``, without the interpreter tearing down the modules the server preloaded:
    that writes to (so copies) every page the fork shares, ~0.3 CPU s a command, and nothing a command leaves
    depends on it (open files are closed by their collection, or by the atexit handlers that flush them)."""
    status = 0 if code is None else code if isinstance(code, int) else 1
    if not isinstance(code, int) and code is not None:
        print(code, file=sys.stderr)
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize calls first: joins non-daemon threads
    atexit._run_exitfuncs()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # as the interpreter's exit: a failure to flush is status 120
            status = 120
    os._exit(status)


if __name__ == "__main__":
    request = serve(sys.argv[1], warm="--warm" in sys.argv[2:], lazy="--lazy" in sys.argv[2:])
    try:
        run_entry(request)
    except SystemExit as exit_:
        finish(exit_.code)
