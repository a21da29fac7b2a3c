"""``python -m fedrun.cli`` (and the ``fedrun`` command): refuse memory limits too small for a run, and route
signals from the first instruction, before Hydra, pandas and torch are imported (fedrun/host/interrupts.py)."""

from __future__ import annotations

import sys


def main() -> None:
    """The ``fedrun`` command; the process ends without walking its objects again (fedrun/host/exits.py)."""
    from fedrun.host.exits import ending_process

    ending_process(_main)


def _main() -> None:
    if "--version" in sys.argv[1:]:  # answered before the imports below (seconds)
        from fedrun.cli.help import print_version_if_asked

        print_version_if_asked(sys.argv[1:])
    from fedrun.host.interrupts import loading
    from fedrun.host.limits import refuse_small_memory_limits

    refuse_small_memory_limits()  # before the imports below, which a small limit makes fail
    # handed over to fedrun_main's own routing (fedrun/cli/main.py): no moment in between is unrouted
    with loading("nothing was started; run the command again", handover=True):
        from fedrun.cli.main import main as fedrun_main
    if "--privacy-noise" in sys.argv[1:]:  # a question about the run, not a run (fedrun/cli/privacy_query.py)
        from fedrun.cli.privacy_query import main as privacy_noise

        privacy_noise(sys.argv[1:])
    fedrun_main()


if __name__ == "__main__":
    main()
