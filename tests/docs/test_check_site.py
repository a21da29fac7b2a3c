"""scripts/check_site.py, the check that the built site reads from disk (``make docs`` runs it on site/)."""

import importlib.util
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_site", ROOT / "scripts" / "check_site.py")
assert _spec is not None and _spec.loader is not None
check_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_site)


def _site(tmp_path: Path, pages: dict[str, str], search: bool = True) -> Path:
    for name, body in pages.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"<html><body>{body}</body></html>")
    if search:
        (tmp_path / "search").mkdir(exist_ok=True)
        (tmp_path / "search" / "search_index.js").write_text("var __index = {}")
    return tmp_path


def test_links_to_pages_and_assets_pass(tmp_path):
    site = _site(
        tmp_path,
        {
            "index.html": '<a href="cli.html#x">cli</a><a href="#top">top</a><img src="a/logo.png">'
            '<a href="https://example.org/">out</a>',
            "cli.html": '<a href="index.html">home</a><a href="ref/data.html">data</a>',
            "ref/data.html": '<a href="../index.html">home</a>',
            "a/logo.png": "",
        },
    )
    assert check_site.bad_links(site) == []
    assert check_site.main([str(site)]) == 0


def test_a_link_to_a_directory_or_to_nothing_is_named(tmp_path):
    site = _site(tmp_path, {"index.html": '<a href="cli/">cli</a><a href="gone.html">x</a>', "cli/index.html": ""})
    assert check_site.bad_links(site) == ["index.html: cli/ (a directory)", "index.html: gone.html (nothing there)"]
    assert check_site.main([str(site)]) == 1


def test_a_script_from_the_network_is_named(tmp_path):
    site = _site(tmp_path, {"index.html": '<script src="https://unpkg.com/iframe-worker/shim"></script>'})
    assert check_site.bad_links(site) == [
        "index.html: https://unpkg.com/iframe-worker/shim (a script from the network: fails offline)"
    ]


def test_a_site_without_the_inlined_search_index_fails(tmp_path):
    site = _site(tmp_path, {"index.html": ""}, search=False)
    assert check_site.bad_links(site) == ["search/search_index.js: missing (search does not work offline)"]


def test_mkdocs_builds_file_urls_with_offline_search():
    conf = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assert conf["use_directory_urls"] == "false"
    assert {"search", "offline"} <= set(conf["plugins"])
    shim = conf["extra"]["polyfills"][0]  # the offline plugin's worker shim, served from the site
    assert "iframe-worker" in shim and (ROOT / "docs" / shim).is_file()


def test_make_docs_runs_the_check():
    recipe = (ROOT / "Makefile").read_text().split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/check_site.py" in recipe
