"""Checks a built documentation site (``make docs`` builds it into site/) reads from disk: every local link and asset
of every page resolves to a file (a link to a directory opens a bare listing from ``file://``; a link to nothing is
broken), no page loads a script from the network, and the search index is inlined for the offline search.
Usage: ``python scripts/check_site.py [site]``; exit 1 naming each bad link.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# where Material's offline plugin inlines the search index (a script, so search needs no server)
SEARCH_INDEX = Path("search") / "search_index.js"
# the page a web server shows for a missing URL: its links are absolute (from the server's root) by design, and
# nothing on disk links to it
NOT_FROM_DISK = Path("404.html")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.remote_scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)
                if tag == "script" and urlsplit(value).scheme:
                    self.remote_scripts.append(value)


def local_target(page: Path, link: str) -> Path | None:
    """The file a relative link of ``page`` points to; None for a fragment, an absolute URL or another scheme."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return (page.parent / unquote(parts.path)).resolve()


def bad_links(site: Path) -> list[str]:
    """``page: link (why)`` for every local link of a page under ``site`` that is not a file."""
    bad = []
    for page in sorted(site.rglob("*.html")):
        if page.relative_to(site) == NOT_FROM_DISK:
            continue
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        bad += [
            f"{page.relative_to(site)}: {src} (a script from the network: fails offline)"
            for src in parser.remote_scripts
        ]
        for link in parser.links:
            target = local_target(page, link)
            if target is None or target.is_file():
                continue
            why = "a directory" if target.is_dir() else "nothing there"
            bad.append(f"{page.relative_to(site)}: {link} ({why})")
    if not (site / SEARCH_INDEX).is_file():
        bad.append(f"{SEARCH_INDEX}: missing (search does not work offline)")
    return bad


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else "site")
    if not (site / "index.html").is_file():
        print(f"check_site: {site}/index.html: not found; run `make docs` first", file=sys.stderr)
        return 1
    bad = bad_links(site)
    for line in bad:
        print(f"check_site: {line}", file=sys.stderr)
    pages = sum(1 for _ in site.rglob("*.html"))
    print(f"check_site: {pages} pages, {len(bad)} bad links" + ("" if bad else "; every page opens from disk"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
