"""What a checkout's config composes to, measured the same way on any tree (issue 31 point 3: one home per default).

``compose``: ``fedrun --cfg job`` of every option of every group of conf/ and of every preset (conf/experiment/),
composed in-process, as one JSON object (option -> YAML text); two snapshots compare with ``compare``.
``restated``: the values the YAMLs of the groups (all but experiment and hydra) state that composing gives without
them too (a restated default), and the places ``data.root`` is stated.

    python scripts/config_snapshot.py compose > /tmp/before.json     # on the parent commit's tree
    python scripts/config_snapshot.py compose > /tmp/after.json      # on this one
    python scripts/config_snapshot.py compare /tmp/before.json /tmp/after.json
    python scripts/config_snapshot.py restated
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

SKIPPED = ("experiment", "hydra")  # presets state a paper's whole setting; hydra/ is Hydra's own


def _conf() -> Path:
    from fedrun.cli.main import CONF_DIR  # stores every component's schema, as `fedrun` does

    return Path(CONF_DIR)


def _override(group: str, option: str) -> str:
    return f"{group}=[{option}]" if group == "tracking" else f"{group}={option}"


def _compose(conf: Path, overrides: list[str]) -> Any:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        return compose(config_name="config", overrides=overrides)


def snapshot() -> dict[str, str]:
    """Every option's (and the bare command's) composed config, as ``fedrun --cfg job`` prints it."""
    conf = _conf()
    jobs = [[]] + [
        [_override(p.parent.name, p.stem)] for p in sorted(conf.glob("*/*.yaml")) if p.parent.name != "hydra"
    ]
    return {" ".join(job) or "(none)": OmegaConf.to_yaml(_compose(conf, job)) for job in jobs}


def _leaves(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def restated() -> tuple[int, list[str]]:
    """(the values the groups' YAMLs state, those of them that restate what composing without them gives)."""
    conf = _conf()
    copy = Path(tempfile.mkdtemp()) / "conf"
    shutil.copytree(conf, copy)
    total, found = 0, []
    for path in sorted(copy.glob("*/*.yaml")):
        group = path.parent.name
        if group in SKIPPED:
            continue
        text = path.read_text()
        node = yaml.safe_load(text) or {}
        package = re.search(r"^# @package (\S+)", text, re.M)
        prefix = "" if package and package[1] == "_global_" else f"{package[1] if package else group}."
        header = f"# @package {package[1]}\n" if package else ""
        path.write_text(header + (yaml.safe_dump({"defaults": node["defaults"]}) if "defaults" in node else ""))
        base = OmegaConf.create(OmegaConf.to_container(_compose(copy, [_override(group, path.stem)]), resolve=False))
        path.write_text(text)
        for key, value in _leaves({k: v for k, v in node.items() if k != "defaults"}):
            total += 1
            default = OmegaConf.select(base, prefix + key, default=KeyError)
            same = default == value and isinstance(default, bool) == isinstance(value, bool)
            if same and isinstance(default, str) == isinstance(value, str):
                found.append(f"conf/{group}/{path.name}: {key}: {value!r}")
    shutil.rmtree(copy.parent)
    return total, found


def root_statements(repo: Path) -> list[str]:
    """Where ``data.root``'s value is stated: a ``root:`` key of a data YAML, a ``root`` field's default."""
    out = [
        f"{p.relative_to(repo)}: {line.strip()}"
        for p in sorted((repo / "conf" / "data").glob("*.yaml"))
        for line in p.read_text().splitlines()
        if line.startswith("root:")
    ]
    for p in sorted((repo / "fedrun" / "data").rglob("*.py")):
        out += [
            f"{p.relative_to(repo)}: {line.strip()}"
            for line in p.read_text().splitlines()
            if re.match(r"\s+root: str = ", line)
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("compose", help="every option's composed config, as JSON on stdout")
    cmp = sub.add_parser("compare", help="two compose snapshots: the options whose config differs")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    sub.add_parser("restated", help="the YAML values that restate a default, and where data.root is stated")
    args = parser.parse_args()
    if args.command == "compose":
        json.dump(snapshot(), sys.stdout, indent=1, sort_keys=True)
    elif args.command == "compare":
        before, after = (json.loads(p.read_text()) for p in (args.before, args.after))
        differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        print(f"{len(before)} / {len(after)} options composed; differing: {len(differ)}")
        print("\n".join(differ))
        sys.exit(1 if differ else 0)
    else:
        total, found = restated()
        print("\n".join(found))
        print(f"{len(found)} of {total} values of the groups' YAMLs restate a default")
        roots = root_statements(Path(__file__).resolve().parent.parent)
        values = {line.split(":", 1)[1].split("=", 1)[-1].split("#")[0].strip() for line in roots}
        print(f"data.root stated in {len(roots)} places, {len(values)} values: " + "; ".join(roots))


if __name__ == "__main__":
    main()
