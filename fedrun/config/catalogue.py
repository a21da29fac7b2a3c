"""The documentation's reference pages of the registries: methods, datasets, partitions and models.

Each page is generated from what defines the component, so a new one documents itself: the entry of its registry
(:mod:`fedrun.config.registry`: the class or factory, its docstring, and the dataclass of its hyperparameters with
types, defaults and each field's note: the comment on its line or the comment lines right above it, which cite the
default's source, :func:`field_notes`) and its YAML option ``conf/<group>/<name>.yaml`` (the header comment, which
cites the paper, and the values in which this option differs from the dataclass's defaults, each with its inline
comment). The dataclass is the one home of a default: a YAML never restates one (tests/config/test_schema_store.py).
The documentation site's build hook (``docs/hooks.py``) writes these pages; :func:`pages` is everything it needs.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import re
import textwrap
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from fedrun.config import location
from fedrun.config import registry as reg
from fedrun.config.schema import COMPONENT_GROUPS, FedrunConfig, run_sections
from fedrun.config.sections import section_choices

# (group, registry, page, title, what one option is)
GROUPS = (
    ("algorithm", reg.ALGORITHMS, "reference/methods", "Methods", "a federated method: `algorithm=<name>`"),
    ("data", reg.DATASETS, "reference/data", "Datasets", "a dataset: `data=<name>`"),
    (
        "partition",
        reg.PARTITIONS,
        "reference/partitions",
        "Partitions",
        "how the training set is split: `partition=<name>`",
    ),
    ("model", reg.MODELS, "reference/models", "Models", "a network: `model=<name>`"),
)
SETTINGS_PAGE = "reference/settings.md"  # the run's own sections (fl, eval, ...), from fedrun/config/schema.py
_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w.]*)\s*:(?P<rest>.*)$")


@dataclass(frozen=True)
class Field:
    """One hyperparameter of an option: ``group.key``, its type, its default for this option and what it means."""

    key: str
    type: str
    default: str
    comment: str


@dataclass(frozen=True)
class Option:
    """One option of a config group, as its page shows it."""

    group: str
    name: str
    header: str  # the YAML option's header comment ('' without one)
    doc: str  # the registered class's (or factory's) docstring
    params_doc: str  # the hyperparameter dataclass's docstring
    source: str  # the module that registers it
    fields: tuple[Field, ...]

    @property
    def summary(self) -> str:
        """The one-line doc: the header comment's first line, else the docstring's (as ``fedrun --help``)."""
        for text in (self.header, self.doc, self.params_doc):
            if text.strip():
                return text.strip().splitlines()[0]
        return ""


def yaml_comments(path: Path) -> tuple[str, dict[str, str]]:
    """A YAML file's header comment (its leading ``#`` lines, ``# @package`` skipped) and each key's inline
    comment, by dotted key (``fl.lr``)."""
    if not path.is_file():
        return "", {}
    lines = path.read_text(encoding="utf-8").splitlines()
    header: list[str] = []
    for line in lines:
        text = line.strip()
        if not text.startswith("#"):
            break
        if not text.startswith("# @package"):
            header.append(text[1:].strip())
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in lines:
        match = _KEY.match(line)
        if not match:
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = ".".join([k for _, k in stack] + [match["key"]])
        stack.append((indent, match["key"]))
        rest = match["rest"]
        if "#" in rest and rest.count("'", 0, rest.index("#")) % 2 == 0:
            comments[key] = rest.split("#", 1)[1].strip()
    return "\n".join(header).strip(), comments


def _class_notes(cls: type) -> dict[str, str]:
    """The notes of the fields that the body of ``cls`` itself declares: each one's comment on its line, else the
    run of comment lines right above it, joined into one line."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # defined where no source is (a REPL, a generated class)
        return {}
    notes: dict[str, str] = {}
    above: list[str] = []  # the comment lines just read, for the field that follows them
    line: list[tokenize.TokenInfo] = []  # the tokens of the logical line being read
    body = -1  # the class body's indentation: its first INDENT's
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and not line:
            above.append(tok.string.lstrip("#").strip())
        elif tok.type == tokenize.NL and not line:
            if not tok.line.strip():
                above = []  # a blank line parts a comment block from the field below
        elif tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            words = [t for t in line if t.type not in (tokenize.COMMENT, tokenize.NL)]
            own = [t.string.lstrip("#").strip() for t in line if t.type == tokenize.COMMENT]
            declares = len(words) >= 2 and words[0].type == tokenize.NAME and words[1].string == ":"
            if declares and words[0].start[1] == body:
                notes[words[0].string] = " ".join(own or above).strip()
            line, above = [], []
        elif tok.type == tokenize.INDENT:
            body = len(tok.string) if body < 0 else body
        elif tok.type != tokenize.DEDENT:
            line.append(tok)
    return notes


@functools.cache
def field_notes(params: type) -> dict[str, str]:
    """Each field of the dataclass ``params`` with its one-line note, from the class that declares the field
    (a subclass that changes a default and says nothing keeps its base's note): the one home of what a key is
    and where its default comes from, read by the reference pages."""
    notes: dict[str, str] = {}
    for cls in (*reversed(params.__mro__), *getattr(params, "__fedrun_parts__", ())):  # (a section built of parts)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            notes.update({k: v for k, v in _class_notes(cls).items() if v or k not in notes})
    # a field made by code (a registry's on/off switch) has no source line: its note is in its metadata
    return {f.name: notes.get(f.name) or f.metadata.get("note", "") for f in dataclasses.fields(params) if f.init}


def yaml_values(path: Path) -> dict[str, Any]:
    """A YAML option's own values (its ``defaults`` list left out), or {} without the file."""
    if not path.is_file():
        return {}
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert isinstance(node, dict)
    node.pop("defaults", None)
    return {str(k): v for k, v in node.items()}


def type_name(tp: Any) -> str:
    """A type annotation as a reader writes it: ``float``, ``int | None``, ``'exp' | 'quad'``."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and origin is None:
        return tp.__name__
    return str(tp).replace("typing.", "")


def _value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    return str(v)


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return "(required)"


def section_fields(params: type, prefix: str) -> list[Field]:
    """Every key of the dataclass ``params`` under ``prefix`` (``fl.``), a nested dataclass's keys dotted below its
    own (``tracking.mlflow.uri``), each with its type, default and note (:func:`field_notes`)."""
    hints, notes = typing.get_type_hints(params), field_notes(params)
    out: list[Field] = []
    for f in dataclasses.fields(params):
        if not f.init:
            continue
        default = _default_of(f)
        if dataclasses.is_dataclass(default):
            out += section_fields(type(default), f"{prefix}{f.name}.")
        else:
            out.append(Field(f"{prefix}{f.name}", type_name(hints[f.name]), _value(default), notes[f.name]))
    return out


def option(group: str, name: str, conf_dir: Path | None = None) -> Option:
    """The option ``name`` of ``group`` from its registry entry and its YAML file (either may be missing: a
    component registered from outside the package has no YAML here; a YAML may only preset another's keys)."""
    registry = next(r for g, r, *_ in GROUPS if g == group)
    path = (conf_dir or location.CONF_DIR) / group / f"{name}.yaml"
    header, comments = yaml_comments(path)
    values = yaml_values(path)
    entry = registry.get(name) if name in registry.names() else None
    fields: list[Field] = []
    doc = params_doc = source = ""
    if entry is not None:
        doc = inspect.getdoc(entry.obj) or ""
        source = getattr(entry.obj, "__module__", "")
        params = entry.params
        if params is not None and dataclasses.is_dataclass(params):
            own = inspect.getdoc(params) or ""
            inherited = {inspect.getdoc(base) for base in params.__mro__[1:]}
            params_doc = "" if own in inherited else own
            for row in section_fields(params, f"{group}."):
                key = row.key.split(".", 1)[1]
                value = _value(values[key]) if key in values else row.default
                note = comments.get(key) or row.comment  # a preset value's source, else the field's note
                fields.append(dataclasses.replace(row, default=value, comment=note))
    else:
        fields = [Field(f"{group}.{k}", "", _value(v), comments.get(k, "")) for k, v in values.items() if k != "name"]
    return Option(group, name, header, doc, params_doc, source, tuple(fields))


def options(group: str, conf_dir: Path | None = None) -> list[Option]:
    """Every option of ``group``: each registered name and each YAML file of ``conf/<group>/``, sorted."""
    registry = next(r for g, r, *_ in GROUPS if g == group)
    folder = (conf_dir or location.CONF_DIR) / group
    names = set(registry.names()) | {p.stem for p in folder.glob("*.yaml")}
    return [option(group, n, conf_dir) for n in sorted(names)]


# ---- Markdown ----------------------------------------------------------------------------------------------


def prose(text: str) -> str:
    """Source text (a comment or docstring) as Markdown that shows it as written: reST ````code```` becomes a code
    span, and outside code spans the characters Markdown would read as markup (``_ * < > [ ] |``) are escaped."""
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    parts = re.split(r"(`[^`\n]+`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part.replace("|", "\\|"))
        else:
            out.append(re.sub(r"([\\_*<>\[\]|#])", r"\\\1", part))
    return "".join(out)


def paragraphs(text: str) -> str:
    """Prose of a comment block: lines kept as lines (a comment's line breaks carry its layout)."""
    blocks = [b for b in re.split(r"\n\s*\n", text.strip()) if b.strip()]
    return "\n\n".join("  \n".join(prose(line.strip()) for line in b.splitlines()) for b in blocks)


def _cell(text: str) -> str:
    return prose(text).replace("\n", " ")


def fields_table(fields: tuple[Field, ...]) -> str:
    """The hyperparameters as a Markdown table (or a sentence when there are none)."""
    if not fields:
        return "No hyperparameters of its own."
    rows = ["| key | type | default | note |", "|---|---|---|---|"]
    for f in fields:
        rows.append(f"| `{f.key}` | {_cell(f.type)} | `{f.default}` | {_cell(f.comment)} |")
    # the site's stylesheet keeps a default whole in this table only (docs/assets/stylesheets/fedrun.css)
    return '<div class="fedrun-keys" markdown>\n\n' + "\n".join(rows) + "\n\n</div>"


def _section(opt: Option, level: str) -> list[str]:
    out = [f"{level} `{opt.name}`", ""]
    if opt.header:
        out += [paragraphs(opt.header), ""]
    if opt.doc and opt.doc.strip() != opt.header.strip():
        out += [paragraphs(opt.doc), ""]
    if opt.params_doc:
        out += [paragraphs(opt.params_doc), ""]
    out += [f"Choose it with `{opt.group}={opt.name}`."]
    if opt.source:
        out[-1] += f" Code: `{opt.source}`; config: `conf/{opt.group}/{opt.name}.yaml`."
    out += ["", fields_table(opt.fields), ""]
    return out


def method_page(opt: Option, used_by: list[str]) -> str:
    """One method's page: what it is, its paper (the YAML header), its hyperparameters, the targets using it."""
    out = [f"# {opt.name}", "", *_section(opt, "##")[2:]]
    if used_by:
        out += ["## In the paper targets", "", *[f"- {u}" for u in used_by], ""]
    return "\n".join(out)


def index_page(group: str, title: str, what: str, opts: list[Option], linked: bool) -> str:
    """A group's index: one line per option with its one-line doc (linking to its page when ``linked``)."""
    out = [f"# {title}", "", f"Generated from the registry and `conf/{group}/`: one entry per option, {what}.", ""]
    out += ["| option | what it is |", "|---|---|"]
    for opt in opts:
        name = f"[`{opt.name}`]({opt.name}.md)" if linked else f"[`{opt.name}`](#{opt.name})"
        out.append(f"| {name} | {_cell(opt.summary)} |")
    return "\n".join(out) + "\n"


def settings_page() -> str:
    """The run's own settings (``fl.*``, ``eval.*``, ``hardware.*`` ... and the top-level keys): a table per section
    of :class:`~fedrun.config.schema.FedrunConfig`, each key with its type, default and note."""
    out = [
        "# Run settings",
        "",
        "Generated from `fedrun/config/schema.py`: every key of a run besides its components' (whose pages are the",
        "methods, datasets, partitions and models), with its type, its default and the note beside it there, the one",
        "place a default is stated. Override any of them on the command line: `fedrun fl.rounds=50 eval.every=5`.",
        "",
    ]
    choices = section_choices()
    for name, cls in run_sections():
        rows = tuple(
            dataclasses.replace(r, type=" | ".join(repr(c) for c in choices[r.key])) if r.key in choices else r
            for r in section_fields(cls, f"{name}.")
        )
        out += [f"## `{name}`", "", paragraphs(inspect.getdoc(cls) or ""), "", fields_table(rows), ""]
    every = section_fields(FedrunConfig, "")
    top = tuple(r for r in every if "." not in r.key and r.key not in COMPONENT_GROUPS)
    out += ["## Top-level keys", "", fields_table(top), ""]
    return "\n".join(out)


def pages(used_by: dict[str, list[str]] | None = None, conf_dir: Path | None = None) -> dict[str, str]:
    """Every reference page, by its path under ``docs/``: ``reference/methods/index.md`` and ``<name>.md`` per
    method; ``reference/{data,partitions,models}.md`` with a section per option. ``used_by``: per algorithm
    name, the lines saying which paper targets run it (supplied by the papers layer)."""
    out: dict[str, str] = {}
    for group, _, page, title, what in GROUPS:
        opts = options(group, conf_dir)
        if group == "algorithm":
            out[f"{page}/index.md"] = index_page(group, title, what, opts, linked=True)
            for opt in opts:
                out[f"{page}/{opt.name}.md"] = method_page(opt, (used_by or {}).get(opt.name, []))
        else:
            body = index_page(group, title, what, opts, linked=False)
            out[f"{page}.md"] = body + "\n" + "\n".join(line for opt in opts for line in _section(opt, "##"))
    out[SETTINGS_PAGE] = settings_page()
    return out
