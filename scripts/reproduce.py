#!/usr/bin/env python3
"""Run one paper table's sweep and print it in the paper's layout (fedrun/cli/reproduce.py; `make reproduce-list`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fedrun, not another install

from fedrun.cli.reproduce import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
