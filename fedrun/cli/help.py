"""``fedrun --help``: each config group's options with their one-line docs, and ``fedrun --version``.

The options of a group are the YAML files of ``conf/<group>/`` and each one's doc is the first line of its header
comment (else the docstring of the component it registers, fedrun/config/registry.py), so a new method, dataset or
preset shows up by itself. Hydra prints the help from ``hydra.help.template`` (conf/hydra/help/fedrun.yaml), whose
``${fedrun.help_groups:}`` this module's resolver fills; Hydra's own ``$FLAGS_HELP`` and ``$CONFIG`` stay in it,
and ``--hydra-help``, ``--cfg`` and the rest are Hydra's. ``$CONFIG`` is the composed config, as ``--cfg job``
prints it: each default in it comes from its one home, the field of its dataclass (whose note the reference pages
show, :func:`fedrun.config.catalogue.field_notes`); a YAML option adds only the values in which it differs.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
import textwrap
from collections.abc import Iterator
from contextvars import ContextVar
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from fedrun.config import location as conf_location

RESOLVER = "fedrun.help_groups"  # conf/hydra/help/fedrun.yaml
# (group, what an option of it is), in the order a run composes them; the hydra/ groups are fedrun's presets of
# Hydra's sweeper and launcher plugins
GROUPS = (
    ("algorithm", "the federated method"),
    ("data", "the dataset"),
    ("partition", "how the training set is split across clients"),
    ("model", "the network"),
    ("hardware", "device and engine"),
    ("tracking", "experiment trackers, a list: tracking=[mlflow,wandb]"),
    ("system", "the simulated system: dropout, stragglers, devices, asynchronous servers (docs/systems.md)"),
    ("privacy", "differential privacy: client-level DP-FedAvg or sample-level DP-SGD (docs/privacy.md)"),
    ("compression", "upload compression: top-k, random-k, QSGD, scaled sign (docs/compression.md)"),
    ("attack", "poisoning: data or model attacks by a seeded share of the clients (docs/robustness.md)"),
    ("defence", "Byzantine-robust aggregation: Krum, median, FLTrust... (docs/robustness.md)"),
    ("experiment", "presets: a paper's setting, or smoke"),
    ("hydra/sweeper", "sweepers (-m)"),
    ("hydra/launcher", "launchers (-m)"),
)
# which registry names the components of a group (the fallback doc of a YAML without a header comment)
REGISTRY_OF = {"algorithm": "ALGORITHMS", "data": "DATASETS", "partition": "PARTITIONS", "model": "MODELS"}


def fedrun_version() -> str:
    """The installed package's version (its metadata), else the source tree's ``fedrun.__version__``."""
    try:
        return dist_version("fedrun")
    except PackageNotFoundError:
        from fedrun import __version__

        return __version__


def version_line() -> str:
    """``fedrun <version>``: what ``fedrun --version`` and ``fedrun-report --version`` print."""
    return f"fedrun {fedrun_version()}"


def print_version_if_asked(argv: list[str]) -> None:
    """``fedrun --version`` (anywhere on the line, as argparse reads it): ``fedrun <version>``, exit 0, before Hydra
    (whose own ``--version`` prints Hydra's)."""
    if "--version" in argv:
        print(version_line())
        sys.exit(0)


def header_doc(path: Path) -> str:
    """The first line of a YAML file's header comment (``# @package`` lines skipped), or '': the header as the
    generated reference pages read it (:func:`fedrun.config.catalogue.yaml_comments`)."""
    from fedrun.config.catalogue import yaml_comments

    try:
        header, _ = yaml_comments(path)
    except (OSError, UnicodeDecodeError):
        return ""
    return first_sentence(header)


# words whose "." ends no sentence (FedLAW Sec. 4, Li et al. 2020, e.g. ...)
_ABBREVIATIONS = ("al", "Alg", "App", "Sec", "Fig", "Eq", "Eqs", "Tab", "e.g", "i.e", "vs", "cf", "resp", "No")
_ABBREVIATED = re.compile(r"(?<![A-Za-z])(?:" + "|".join(re.escape(a) for a in _ABBREVIATIONS) + r")\.$", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Za-z(\"'`])")


def _first_lines(header: str) -> str:
    """The first paragraph's lines, joined, up to the first line that ends a sentence (a header's next line may
    start in lower case: ``data.variant picks ...``, or be an example command)."""
    kept = []
    for line in header.split("\n\n", 1)[0].splitlines():
        kept.append(line.strip())
        ends = line.rstrip().endswith((".", "!", "?")) and not _abbreviated(line.rstrip())
        if ends:
            break
    return " ".join(" ".join(kept).split())


def _abbreviated(text: str) -> bool:
    """Whether ``text`` ends with an abbreviation's "." (``et al.``, ``Sec.``, an initial), not a sentence's."""
    return bool(_ABBREVIATED.search(text)) or bool(re.search(r"\b[A-Z]\.$", text))


def first_sentence(header: str, limit: int = 160) -> str:
    """The first sentence of a header comment's first paragraph, its lines joined: the whole of a phrase that
    wraps onto the next line, never its first line cut mid-phrase (issue 33, point 8). A sentence longer than
    ``limit`` characters ends at a clause's end (``; `` outside brackets): the last within the limit, else the first."""
    paragraph = _first_lines(header)
    sentence = paragraph
    for end in _SENTENCE_END.finditer(paragraph):
        before = paragraph[: end.start()]
        if not _abbreviated(before):
            sentence = before
            break
    if len(sentence) <= limit:
        return sentence
    depth, clauses = 0, []
    for i, ch in enumerate(sentence):
        depth += (ch in "([{") - (ch in ")]}")
        if depth == 0 and sentence[i : i + 2] == "; ":
            clauses.append(i)
    within = [i for i in clauses if i <= limit]
    cut = within[-1] if within else next(iter(clauses), len(sentence))
    return sentence[:cut]


def registry_doc(group: str, name: str) -> str:
    """The first docstring line of the component ``name`` registered for ``group`` (or of its parameters), or ''."""
    if group not in REGISTRY_OF:
        return ""
    from fedrun.config import registry
    from fedrun.core.errors import ConfigError

    try:
        entry = getattr(registry, REGISTRY_OF[group]).get(name)
    except (ConfigError, ImportError):
        return ""
    for obj in (entry.obj, entry.params):
        doc = (getattr(obj, "__doc__", None) or "").strip()
        if doc:
            return doc.splitlines()[0].strip()
    return ""


def group_options(group: str, conf_dir: Path | None = None) -> list[tuple[str, str]]:
    """``(option, one-line doc)`` of each option of ``group``, sorted by name."""
    folder = (conf_dir or conf_location.CONF_DIR) / group
    options = []
    for path in sorted(folder.glob("*.yaml")):
        options.append((path.stem, header_doc(path) or registry_doc(group, path.stem)))
    return options


MIN_DOC_WIDTH = 40  # a doc column narrower than this wraps at this width (the terminal then wraps it again)


def groups_text(choices: dict[str, Any] | None = None, conf_dir: Path | None = None, width: int | None = None) -> str:
    """The ``== Config groups ==`` part of ``fedrun --help``: per group, its options and docs; ``*`` marks the
    option this command line composes (``choices``: Hydra's ``hydra.runtime.choices``). A doc longer than the line
    (``width``, else the terminal's: ``$COLUMNS``, else 100) wraps between words under its own column: a terminal
    that cut or wrapped it would split it mid-word ("the paper's adaptive al" / "pha")."""
    choices = choices or {}
    columns = width or shutil.get_terminal_size((100, 24)).columns
    blocks = []
    for group, what in GROUPS:
        options = group_options(group, conf_dir)
        if not options:
            continue
        indent = 4 + max(len(name) for name, _ in options) + 2
        wrap = textwrap.TextWrapper(
            width=indent + max(columns - indent, MIN_DOC_WIDTH), subsequent_indent=" " * indent,
            break_long_words=False, break_on_hyphens=False,
        )  # fmt: skip
        lines = [f"{group}: {what}"]
        for name, doc in options:
            mark = "*" if choices.get(group) == name else " "
            lines.append(wrap.fill(f"  {mark} {name:<{indent - 4}}{doc}".rstrip()))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


_COMPOSING: ContextVar[bool] = ContextVar("fedrun_help_composing", default=False)


@contextlib.contextmanager
def composing() -> Iterator[None]:
    """While Hydra composes a config: ``${fedrun.help_groups:}`` gives '' there. OmegaConf's merges evaluate the
    interpolations of ``hydra.help.template`` only to see whether they are a config node (nine times a composition,
    each reading every option's YAML header: ~50 ms of each composition); the help reads the template after
    composing, outside this."""
    token = _COMPOSING.set(True)
    try:
        yield
    finally:
        _COMPOSING.reset(token)


def _help_groups(*, _root_: Any) -> str:
    if _COMPOSING.get():
        return ""
    choices = OmegaConf.select(_root_, "hydra.runtime.choices", default=None)
    plain = OmegaConf.to_container(choices) if choices is not None else {}
    # the text goes through Hydra's string.Template: a '$' of a doc must not read as a placeholder
    chosen = {str(k): v for k, v in plain.items()} if isinstance(plain, dict) else {}
    return groups_text(chosen).replace("$", "$$")


def register_resolvers() -> None:
    """The resolver of ``${fedrun.help_groups:}`` (conf/hydra/help/fedrun.yaml), before Hydra composes."""
    OmegaConf.register_new_resolver(RESOLVER, _help_groups, replace=True)
