"""docs/extending.md's four worked examples of a capability's choice (a compressor, an async server, a device
profile, a privacy mechanism) are fedrun's own files, shown whole: each titled block equals its file, every file of
the four examples is shown, and each example is exactly three files."""

from __future__ import annotations

import re

from tests.conftest import REPO

SECTION = "## A capability, and a choice of one"
EXAMPLES = {
    "half": ("fedrun/upload/compressors/half.py", "conf/compression/half.yaml", "tests/upload/test_half.py"),
    "fedasync_mean": (
        "fedrun/system/servers/fedasync_mean.py", "conf/system/fedasync_mean.yaml", "tests/system/test_fedasync_mean.py"
    ),
    "bimodal": ("fedrun/system/profiles/bimodal.py", "conf/system/bimodal.yaml", "tests/system/test_bimodal.py"),
    "local": ("fedrun/privacy/mechanisms/local.py", "conf/privacy/local.yaml", "tests/privacy/test_local.py"),
}  # fmt: skip


def _blocks() -> dict[str, str]:
    text = (REPO / "docs" / "extending.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r'```\w+ title="([^"]+)"\n(.*?)```', section, re.S))


def test_every_example_file_is_shown_whole_as_it_is() -> None:
    blocks = _blocks()
    assert set(blocks) == {path for files in EXAMPLES.values() for path in files}
    for path, text in blocks.items():
        assert text == (REPO / path).read_text(), path


def test_no_other_file_of_fedrun_reaches_an_examples_module() -> None:
    """Three files each: no other module, option or test imports the example's module or names its class (the
    registries, the reference pages and --help find the choice by themselves)."""
    for files in EXAMPLES.values():
        module_path = files[0]
        module = module_path.removesuffix(".py").replace("/", ".")
        classes = re.findall(r"^class (\w+)\(", (REPO / module_path).read_text(), re.M)
        pattern = re.compile("|".join([re.escape(module), *(rf"\b{c}\b" for c in classes)]))
        others = [
            str(p.relative_to(REPO))
            for folder in ("fedrun", "conf", "tests")
            for p in (REPO / folder).rglob("*")
            if p.suffix in (".py", ".yaml")
            and str(p.relative_to(REPO)) not in files
            and p.name != "test_extending_capabilities.py"
            and pattern.search(p.read_text(encoding="utf-8", errors="replace"))
        ]
        assert classes and not others, (module_path, others)
