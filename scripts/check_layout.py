"""Checks how the built site lays out at a reader's width (``make docs-check``): in headless Chromium at 1,280 px,
every page's code blocks fit their column (a long command wraps instead of being cut on the right) and every table
fits the text column. Each page is opened from disk in a frame of a harness page that measures it (an element's
``scrollWidth`` against its ``clientWidth``); Chromium prints the harness's report (``--dump-dom``).

Usage: ``python scripts/check_layout.py SITE OUT [PAGE.html ...]`` (no pages: every page of SITE). Exit 1 naming
each element that does not fit; exit 0 with one line when Chromium is not installed (``apt-get install chromium``).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

WIDTH = 1280
HEIGHT = 900
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# The harness: loads each page in turn into a WIDTH x HEIGHT frame and measures it once the page has settled; its
# report is a JSON list in <pre id="report"> ({page, column, bad: [{kind, scroll, client, text}]}).
HARNESS = """<!doctype html><html><body style="margin:0"><pre id="report">pending</pre><script>
const pages = JSON.parse(decodeURIComponent(location.hash.slice(1)));
const results = [];
const frame = document.createElement("iframe");
frame.style.cssText = "width:%(width)dpx;height:%(height)dpx;border:0";
document.body.appendChild(frame);
function measure(page) {
  const d = frame.contentDocument, bad = [];
  const column = d.querySelector(".md-content__inner") || d.body;
  d.querySelectorAll(".md-content pre > code").forEach(c => {
    if (c.scrollWidth > c.clientWidth + 1)
      bad.push({kind: "code block", scroll: c.scrollWidth, client: c.clientWidth, text: c.textContent.slice(0, 50)});
  });
  d.querySelectorAll(".md-content table").forEach(t => {
    if (t.scrollWidth > column.clientWidth + 1)
      bad.push({kind: "table", scroll: t.scrollWidth, client: column.clientWidth, text: t.innerText.slice(0, 50)});
  });
  results.push({page, column: column.clientWidth, bad});
}
function next(i) {
  if (i >= pages.length) { document.getElementById("report").textContent = JSON.stringify(results); return; }
  frame.onload = () => setTimeout(() => { try { measure(pages[i]); } catch (e) {
    results.push({page: pages[i], column: 0, bad: [{kind: "error", scroll: 0, client: 0, text: String(e)}]}); }
    next(i + 1); }, 300);
  frame.src = pages[i];
}
next(0);
</script></body></html>
"""


def browser() -> str | None:
    """The Chromium on PATH, or None."""
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def pages_of(site: Path) -> list[Path]:
    """Every page of the site a reader opens (the server's 404 page aside)."""
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html" and "assets" not in p.parts)


def report(dom: str) -> list[dict]:
    """The harness's report from Chromium's dump of its DOM."""
    found = re.search(r'<pre id="report">(.*?)</pre>', dom, re.S)
    if found is None or found.group(1).strip() == "pending":
        raise RuntimeError("the layout harness did not finish (Chromium ended before every page was measured)")
    return json.loads(html.unescape(found.group(1)))


def verdict(results: list[dict], site: Path) -> list[str]:
    """One line per element wider than its column: ``page: kind N px in a column of M px: text``."""
    lines = []
    for r in results:
        name = Path(r["page"].removeprefix("file://")).relative_to(site)
        for b in r["bad"]:
            text = " ".join(b["text"].split())
            lines.append(f"{name}: {b['kind']} {b['scroll']} px wide in a column of {b['client']} px: {text!r}")
    return lines


def measure(chromium: str, site: Path, pages: list[Path], out: Path) -> list[dict]:
    """Run the harness on ``pages`` in ``chromium``; the harness file is written to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    harness = out / "layout-harness.html"
    harness.write_text(HARNESS % {"width": WIDTH, "height": HEIGHT})
    urls = json.dumps([p.resolve().as_uri() for p in pages])
    with tempfile.TemporaryDirectory(prefix="fedrun-layout-") as profile:
        cmd = [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
            "--disable-web-security", f"--user-data-dir={profile}", f"--window-size={WIDTH + 40},{HEIGHT + 40}",
            f"--virtual-time-budget={2000 * len(pages) + 10000}", "--dump-dom",
            f"{harness.resolve().as_uri()}#{quote(urls)}",
        ]  # fmt: skip
        dom = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + 5 * len(pages)).stdout
    results = report(dom)
    if len(results) != len(pages) or any(r["column"] <= 0 for r in results):
        raise RuntimeError(f"the layout harness measured {len(results)} of {len(pages)} pages")
    return results


def main(argv: list[str]) -> int:
    site, out = Path(argv[0] if argv else "site").resolve(), Path(argv[1] if len(argv) > 1 else "outputs/docs-check")
    chromium = browser()
    if chromium is None:
        print("docs-check: no Chromium here (apt-get install chromium): the layout was not checked")
        return 0
    pages = [site / p for p in argv[2:]] or pages_of(site)
    bad = verdict(measure(chromium, site, pages, out), site)
    for line in bad:
        print(f"docs-check: {line}")
    print(f"docs-check: {len(pages)} pages at {WIDTH} px: " + (f"{len(bad)} elements wider than their column" if bad
          else "every code block and table fits its column"))  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
