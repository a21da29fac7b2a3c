"""``make help``'s lines for the paper targets: ``reproduce-<target>`` and ``reproduce-<target>-smoke`` of each
target of the registry (fedrun/papers/targets.py), which the Makefile's pattern rules ``reproduce-%`` and
``reproduce-%-smoke`` run. Usage: ``python scripts/make_help_targets.py [WIDTH]`` (the name column's width).
"""

from __future__ import annotations

import re
import sys

from fedrun.papers.targets import TARGETS

# the last part of a target's name as the paper prints it: table3 -> Table 3, fig8 -> Fig. 8, appf -> App. F
PARTS = (("table", "Table {}"), ("fig", "Fig. {}"), ("app", "App. {}"))


def what(name: str, paper: str) -> str:
    """``FedLAW Table 3`` for ``fedlaw-table3``."""
    last = name.rsplit("-", 1)[-1]
    for prefix, words in PARTS:
        if (m := re.fullmatch(prefix + r"(\w+)", last)) is not None:
            return f"{paper} " + words.format(m.group(1).upper() if prefix == "app" else m.group(1))
    return f"{paper} {last}"


def lines(width: int = 32) -> list[str]:
    """Two lines per target, as ``make help`` prints its other targets: the name padded to ``width``, its doc."""
    out = []
    for t in TARGETS:
        full, smoke = t.runs(), t.runs(smoke=True)
        out.append(f"  {'reproduce-' + t.name:<{width}} {what(t.name, t.paper)}: its {full} runs, then the table")
        out.append(f"  {'reproduce-' + t.name + '-smoke':<{width}} the same sweep shrunk: {smoke} runs in one process")
    return out


if __name__ == "__main__":
    print("\n".join(lines(int(sys.argv[1]) if len(sys.argv) > 1 else 32)))
