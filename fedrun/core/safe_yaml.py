"""YAML that cannot explode: a document whose aliases expand it past a bound is refused before it is built.

A "billion laughs" document (nine levels of ten aliases to the level below, under 1 KB) parses into a few dozen
nodes, but a tree of 10^9 once anything walks it: OmegaConf's copy hung ``fedrun resume=`` for minutes and then
died of MemoryError. Every YAML fedrun reads goes through :class:`BoundedLoader`: :func:`load_yaml` for the
files fedrun reads itself, and :func:`install` for those OmegaConf and Hydra read (configs, a config dir's
experiments, ``.hydra/`` records). Aliases stay allowed, as YAML allows them, but the nodes they add (each alias
counts as the whole subtree it names) may not exceed :data:`MAX_ALIAS_NODES`; the count takes one pass over
the nodes as parsed, so a refusal comes in milliseconds.

The same text is parsed once a process (:data:`PARSED`): every Hydra composition reads its ~27 config files again,
~1 ms each, and a sweep or a test run composes hundreds of times; each read gets its own copy of the data.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from fedrun.core import omegaconf_private
from fedrun.core.errors import ConfigError

MAX_ALIAS_NODES = 10_000  # nodes that aliases may add to a document (a config has a few dozen, if any)
PARSED: dict[tuple[str, str | bytes], Any] = {}  # (loader class, text) -> the document's data, as first parsed
PARSED_MAX = 1024  # texts kept (conf/ has ~200 files); the memo starts again when full


class YamlBomb(ConfigError):
    """A YAML document whose aliases expand past :data:`MAX_ALIAS_NODES`."""


def expanded_size(root: yaml.Node) -> int:
    """The number of nodes in ``root``'s tree once every alias is replaced by what it names (without building
    it: each distinct node is sized once); -1 for an alias inside the node it names. Iterative, so a deep
    document cannot exhaust the stack."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        kids = _children(node)
        if children_done or not kids:
            sizes[id(node)] = 1 + sum(sizes[id(k)] for k in kids)
            visiting.discard(id(node))
            continue
        if id(node) in visiting:  # an alias inside the node it names (``&a [*a]``): endless
            return -1
        visiting.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def distinct_size(root: yaml.Node) -> int:
    """The number of distinct nodes under ``root`` (each alias target counted once)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(_children(node))
    return len(seen)


def check_node(root: yaml.Node, source: str) -> None:
    """Raise :class:`YamlBomb` naming ``source`` if ``root``'s aliases add more than :data:`MAX_ALIAS_NODES`."""
    size = expanded_size(root)
    if size < 0 or size - distinct_size(root) > MAX_ALIAS_NODES:
        raise YamlBomb(
            source,
            f"YAML aliases expand this document by more than {MAX_ALIAS_NODES:,} nodes (a 'billion laughs'"
            " document?); refused unread; valid: a YAML file without such anchors (&) and aliases (*)",
        )


def bounded(loader_class: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """``loader_class`` with every document checked by :func:`check_node` before it is constructed, and a single
    document's data memoised by its text (:data:`PARSED`)."""
    kind = f"{loader_class.__module__}.{loader_class.__qualname__}"

    class BoundedLoader(loader_class):  # type: ignore[misc,valid-type]
        def __init__(self, stream: Any) -> None:
            text = stream.read() if hasattr(stream, "read") else stream
            super().__init__(text)
            if hasattr(stream, "read"):
                self.name = getattr(stream, "name", "<file>")  # as yaml names a stream: its errors name the file
            self.fedrun_key = (kind, text)

        def get_single_data(self) -> Any:
            if self.fedrun_key in PARSED:
                return copy.deepcopy(PARSED[self.fedrun_key])
            data = super().get_single_data()
            if len(PARSED) >= PARSED_MAX:
                PARSED.clear()
            PARSED[self.fedrun_key] = copy.deepcopy(data)
            return data

        def get_single_node(self) -> yaml.Node | None:
            node: yaml.Node | None = super().get_single_node()
            if node is not None:
                check_node(node, str(getattr(self, "name", "<yaml>")))
            return node

    BoundedLoader.__name__ = BoundedLoader.__qualname__ = f"Bounded{loader_class.__name__}"
    return BoundedLoader


def load_yaml(text: str, source: str, plain: bool = False) -> Any:
    """``text`` (the YAML file ``source``) as plain Python objects, the way OmegaConf parses YAML (``plain``: as
    ``yaml.safe_load`` does), with its aliases bounded (:class:`YamlBomb`); malformed YAML is a ConfigError
    naming ``source``, too."""
    loader = yaml.SafeLoader if plain else omegaconf_private.yaml_loader()
    try:
        return yaml.load(text, Loader=bounded(loader))  # noqa: S506 - a SafeLoader
    except YamlBomb as e:
        raise YamlBomb(source, e.message) from None
    except yaml.YAMLError as e:
        raise ConfigError(source, f"not valid YAML: {' '.join(str(e).split())}") from None


def install() -> None:
    """Make OmegaConf (and Hydra, which loads config files through ``OmegaConf.load``) parse YAML with
    :func:`bounded` loaders. Idempotent."""
    original = omegaconf_private.original_yaml_loader_factory()

    def get_yaml_loader() -> Any:
        return bounded(original())

    get_yaml_loader.__wrapped__ = original  # type: ignore[attr-defined]
    omegaconf_private.replace_yaml_loader_factory(get_yaml_loader)
