"""How much of the run knows its capabilities: the numbers of issue 48 ("capabilities as plug-ins"), measured the same
way on any tree.

- ``schema lines``: lines of ``fedrun/config/schema.py``;
- ``closed tuples``: module-level tuples of string choices in ``fedrun/config/`` whose name says they list a pluggable
  kind (servers, compressors, device profiles, privacy modes or mechanisms, methods a capability accepts);
- ``capability names in run/state.py and run/summary.py``, and ``capability references in run/``: the code tokens
  (names, attributes and string literals; comments and docstrings left out) of those files that name a capability or
  a piece of one (:data:`NAMES`, :data:`WORDS`).

    python scripts/capability_audit.py                 # this tree
    python scripts/capability_audit.py --tree DIR      # another checkout (e.g. a git worktree of the parent commit)
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from pathlib import Path

# a code token that names a capability: its section or object (``experiment.system``, ``spec.privacy``), its pieces
# (the upload pipeline, the event queue, the clock, DP's clip and budget, the local test splits), or a string literal
# holding one of those words (a section or column name)
NAMES = re.compile(
    r"(system|privacy|sample_privacy|compression|upload|pipe|UPLOAD_STATE|UploadPipeline|UploadContext|upload_round|"
    r"local_test|local_eval|local_evaluation|LocalEvaluation|unseen|Unseen|is_async|async_rounds|train_update|"
    r"train_async_update|is_eval_update|clock|events|EventQueue|epsilon|dp_clip|ClientDP|SampleDP|SystemModel|"
    r"flops_per_sample|async_bytes|empty_private_round|train_system_round|system_columns|RoundPlan|RoundClose)"
)
WORDS = re.compile(r"(?i)\b(system|privacy|compression|upload|local_test|unseen|async|clock|events|epsilon|dp_clip)\b")


def names_a_capability(token: str) -> bool:
    if token[:1] in "'\"" or token[:2].lower() in ("f'", 'f"', "r'", 'r"'):
        return bool(WORDS.search(token))
    return bool(NAMES.fullmatch(token))


PLUGGABLE = re.compile(r"(?i)(SERVERS|COMPRESSORS|DEVICE_PROFILES|PRIVACY_MODES|MECHANISMS|DP_CLIENT_METHODS)$")


def code_tokens(path: Path) -> list[str]:
    """The names and string literals of ``path``'s code: comments and docstrings left out."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    docs = {
        (node.body[0].value.lineno, node.body[0].value.col_offset)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME or (tok.type == tokenize.STRING and tok.start not in docs):
            out.append(tok.string)
    return out


def references(path: Path) -> int:
    return sum(1 for t in code_tokens(path) if names_a_capability(t))


def closed_tuples(folder: Path) -> list[str]:
    """``module: NAME`` of every module-level tuple of strings in ``folder`` named after a pluggable kind."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            value = getattr(node, "value", None)
            if not isinstance(value, ast.Tuple) or not all(isinstance(e, ast.Constant) for e in value.elts):
                continue
            for t in targets:
                if isinstance(t, ast.Name) and PLUGGABLE.search(t.id):
                    found.append(f"{path.name}: {t.id}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    pkg = args.tree / "fedrun"
    run_files = sorted((pkg / "run").glob("*.py"))
    per_file = {p.name: references(p) for p in run_files}
    rows = [
        ("schema lines (fedrun/config/schema.py)", len((pkg / "config" / "schema.py").read_text().splitlines())),
        ("closed choice tuples naming a pluggable kind (fedrun/config/)", len(closed_tuples(pkg / "config"))),
        ("capability names in run/state.py", per_file.get("state.py", 0)),
        ("capability names in run/summary.py", per_file.get("summary.py", 0)),
        ("capability references in run/", sum(per_file.values())),
    ]
    for what, n in rows:
        print(f"{n:6d}  {what}")
    for name, n in per_file.items():
        if n:
            print(f"        run/{name}: {n}")
    for t in closed_tuples(pkg / "config"):
        print(f"        closed: {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
