"""MkDocs build hook: adds the generated pages to the site (mkdocs.yml ``hooks:``).

- ``index.md``: the README, its ``docs/`` links made relative to the site, so the README's links are checked by
  ``mkdocs build --strict`` too;
- the reference and reproduction pages of :func:`fedrun.papers.reproduction.doc_pages` (methods, datasets,
  partitions, models, the papers' targets and presets, the measured cells), generated from the registries, the
  YAML comments and the evidence records at every build, never written into ``docs/``.

In the nav, an entry whose page is a generated index (``reference/methods/index.md``, ``papers/index.md``) is
expanded with the pages beside it, so a new method or paper gets its nav entry without an edit here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

_PAGES: dict[str, str] = {}
EXPANDED = ("reference/methods/index.md", "papers/index.md")


def readme_as_home(text: str) -> str:
    """The README as the site's home page: ``](docs/x.md)`` links become ``](x.md)``."""
    return re.sub(r"\]\(docs/", "](", text)


def _pages(config: Any) -> dict[str, str]:
    if not _PAGES:
        from fedrun.papers.reproduction import doc_pages

        _PAGES.update(doc_pages())
        readme = Path(config["config_file_path"]).parent / "README.md"
        _PAGES["index.md"] = readme_as_home(readme.read_text(encoding="utf-8"))
    return _PAGES


def expand_nav(nav: list[Any], pages: dict[str, str]) -> list[Any]:
    """``nav`` with each generated index entry turned into a section: the index, then its folder's pages."""
    out: list[Any] = []
    for item in nav:
        if isinstance(item, dict):
            (title, value), *_ = item.items()
            if isinstance(value, list):
                out.append({title: expand_nav(value, pages)})
                continue
            if value in EXPANDED:
                folder = value.rsplit("/", 1)[0]
                children = sorted(p for p in pages if p.startswith(folder + "/") and p != value)
                out.append({title: [value, *children]})
                continue
        out.append(item)
    return out


def on_config(config: Any) -> Any:
    _PAGES.clear()  # a rebuild (mkdocs serve) regenerates
    config["nav"] = expand_nav(config["nav"], _pages(config))
    return config


def on_files(files: Files, config: Any) -> Files:
    for path, text in _pages(config).items():
        if files.get_file_from_path(path) is not None:
            raise ValueError(f"docs/{path} is generated: remove the file from docs/")
        files.append(File.generated(config, path, content=text))
    return files
