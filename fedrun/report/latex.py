"""A report table as a LaTeX ``table`` that compiles as it is: special characters escaped, ``±``/Greek letters
as math, the best value of each column in bold, and a caption naming the metric, n and the std convention.

Only the LaTeX kernel is used (no booktabs, no packages): ``\\input`` it into any document.
"""

from __future__ import annotations

import re

import pandas as pd

_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}
_MATH = {"±": r"$\pm$", "σ": r"$\sigma$", "γ": r"$\gamma$", "λ": r"$\lambda$", "×": r"$\times$", "−": "-"}
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)")


def escape(text: object) -> str:
    """``text`` with LaTeX's special characters escaped and the symbols fedrun prints written as math."""
    out = []
    for ch in str(text):
        out.append(_SPECIAL.get(ch) or _MATH.get(ch) or (ch if ord(ch) < 256 else "?"))
    return "".join(out)


def leading_number(cell: object) -> float | None:
    """The number a cell starts with ("85.00 ± 1.00" -> 85.0, "70.00 (72.50)" -> 70.0); None for a status."""
    m = _NUMBER.match(str(cell))
    return float(m.group(1)) if m else None


def best_rows(column: pd.Series, direction: str | None) -> set[int]:
    """Positions of the best cells of a column (``max`` or ``min``; ties all bold); none with < 2 numbers."""
    if direction not in ("max", "min"):
        return set()
    values = [(i, leading_number(v)) for i, v in enumerate(column)]
    nums = [(i, v) for i, v in values if v is not None]
    if len(nums) < 2:
        return set()
    target = max(v for _, v in nums) if direction == "max" else min(v for _, v in nums)
    return {i for i, v in nums if v == target}


def caption_notice(caption: str, notice: str) -> str:
    """``caption`` followed by ``notice`` as a sentence of its own (capitalised, ending with a full stop)."""
    if not notice:
        return caption
    sentence = notice[:1].upper() + notice[1:] + ("" if notice.endswith(".") else ".")
    return f"{caption} {sentence}" if caption else sentence


def to_latex(
    table: pd.DataFrame, caption: str, direction: dict[str, str | None] | str | None = "max", notice: str = ""
) -> str:
    """``table`` (string cells) as a LaTeX table; ``direction`` per column (or for all): which value is best.
    A ``notice`` (stand-in data: fedrun.report.provenance) leads the file as ``%`` comment lines and ends the
    caption, so it stays with the table however it is included."""
    cols = [str(c) for c in table.columns]
    bold = {}
    for j, c in enumerate(table.columns):
        d = direction.get(str(c)) if isinstance(direction, dict) else direction
        bold[j] = best_rows(table[c], d)
    head = [escape(table.index.name or "")] + [escape(c) for c in cols]
    lines = [f"% {line}" for line in notice.splitlines()]
    lines += [
        r"\begin{table}[t]",
        r"\centering",
        r"\caption{" + escape(caption_notice(caption, notice)) + "}",
        r"\begin{tabular}{l" + "r" * len(cols) + "}",
        r"\hline",
        " & ".join(head) + r" \\",
        r"\hline",
    ]
    for i, (idx, row) in enumerate(table.iterrows()):
        cells = [escape(idx)]
        for j, v in enumerate(row):
            text = escape(v)
            cells.append(r"\textbf{" + text + "}" if i in bold[j] else text)
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\hline", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)
