"""How a pipeline file's text becomes documents: read as kubectl reads it, within bounds.

Every command that reads pipeline files (`graph.load`, and through it validate, plan, graph, run
and wait; `plan --against`) reads them through `yaml_documents`, so there is one reader to keep
safe. PyYAML composes a document into nodes, where an alias is one more reference to its anchor's
node: cheap to compose, but everything after (the schema checks, the models, JSON) walks the
document with every alias written out. Anchors that refer to anchors grow exponentially as they
are written out ("billion laughs": nine levels of nine references are 387 million values), so a
document is measured on its nodes before anything walks it (each node measured once, however
often it is referred to) and refused when its aliases add more than `MAX_ALIASED_NODES` values,
nest it deeper than `MAX_YAML_DEPTH`, or make it contain itself. A pipeline file with a few
anchors (a shared schema, a shared list of inputs) is far inside those bounds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

# Lists and mappings may nest this deep in a document: PyYAML composes a document, and the
# checks walk it, recursively; a pipeline's resources need a dozen levels at most.
MAX_YAML_DEPTH = 64
# Values that aliases may add to a document, written out: a thousand references to an anchor
# of a hundred values. Measuring costs what the document's own text does, not what it expands to.
MAX_ALIASED_NODES = 100_000


class BeyondLimits(yaml.MarkedYAMLError):
    """A document larger, deeper or more self-referring than Distributary reads."""


class NestedTooDeeply(BeyondLimits):
    """A document whose lists and mappings nest deeper than `MAX_YAML_DEPTH`."""


class AliasesExpandTooFar(BeyondLimits):
    """A document whose aliases, written out, add more than `MAX_ALIASED_NODES` values or
    contain the node they are in."""


_TOO_DEEP = (
    f"nests lists and mappings more than {MAX_YAML_DEPTH} levels deep, the most Distributary "
    "reads: flatten the document"
)


class _KubectlLoader(yaml.SafeLoader):
    """PyYAML's safe loader made to read as kubectl does: a timestamp stays a string (the API
    server checks its format). It refuses lists and mappings nested deeper than
    `MAX_YAML_DEPTH`, where composing would otherwise exhaust Python's stack."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        collection = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        if collection and self._depth >= MAX_YAML_DEPTH:
            raise NestedTooDeeply(
                problem=_TOO_DEEP,
                problem_mark=self.peek_event().start_mark,  # type: ignore[no-untyped-call]
            )
        self._depth += collection
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= collection


_KubectlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _Measure:
    """Each node's size and height with its aliases written out, each node measured once."""

    def __init__(self) -> None:
        self.measured: dict[int, tuple[int, int]] = {}
        self.open: set[int] = set()

    def __call__(self, node: yaml.Node, depth: int) -> tuple[int, int]:
        known = self.measured.get(id(node))
        if known is None:
            if isinstance(node, yaml.CollectionNode) and depth >= MAX_YAML_DEPTH:
                raise NestedTooDeeply(
                    problem=f"{_TOO_DEEP} (its aliases nest it that deep)",
                    problem_mark=node.start_mark,
                )
            known = self._measure(node, depth)
        _, height = known
        if depth + height > MAX_YAML_DEPTH:
            raise NestedTooDeeply(
                problem=f"{_TOO_DEEP} (its aliases nest it that deep)",
                problem_mark=node.start_mark,
            )
        return known

    def _measure(self, node: yaml.Node, depth: int) -> tuple[int, int]:
        if id(node) in self.open:
            raise AliasesExpandTooFar(
                problem="has an alias inside the very list or mapping it refers to, which "
                "would make the document contain itself: write the value out instead",
                problem_mark=node.start_mark,
            )
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        self.open.add(id(node))
        size, height = 1, 0
        for child in children:
            child_size, child_height = self(child, depth + isinstance(node, yaml.CollectionNode))
            size += child_size
            height = max(height, child_height + isinstance(node, yaml.CollectionNode))
        self.open.discard(id(node))
        self.measured[id(node)] = (size, height)
        return size, height


def check_aliases(node: yaml.Node) -> None:
    """Raise `BeyondLimits` when `node`'s aliases, written out, would add more than
    `MAX_ALIASED_NODES` values, nest it deeper than `MAX_YAML_DEPTH`, or contain itself."""
    measure = _Measure()
    size, _ = measure(node, 0)
    added = size - len(measure.measured)
    if added > MAX_ALIASED_NODES:
        raise AliasesExpandTooFar(
            problem=f"has aliases (*name) that, written out, add {added:,} values to the "
            f"document, more than the {MAX_ALIASED_NODES:,} Distributary reads (anchors that "
            "refer to anchors grow exponentially): write the values out, or refer to large "
            "anchors less often",
            problem_mark=node.start_mark,
        )


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _repeated_keys(node: yaml.Node, path: str, seen: set[int]) -> Iterator[tuple[str, str]]:
    """Each key repeated in a mapping of the node tree: its field path and the message. Keys are
    compared as text, as kubectl compares them once the document is JSON."""
    if id(node) in seen:  # an alias to a node already walked
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _repeated_keys(item, f"{path}[{index}]", seen)
    elif isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge" or not isinstance(key, yaml.ScalarNode):
                continue
            line = key.start_mark.line + 1
            if key.value in lines:
                yield (
                    _join(path, key.value),
                    f"is written twice in one mapping (line {lines[key.value]} and line "
                    f"{line}): remove one of them (YAML would silently keep only the last)",
                )
            else:
                lines[key.value] = line
            yield from _repeated_keys(value, _join(path, key.value), seen)


def yaml_documents(text: str) -> Iterator[tuple[int, Any, list[tuple[str, str]]]]:
    """Each YAML document in `text` as kubectl reads it: its number (from 1), its value, and
    the field path and message of each key it repeats. Raises `yaml.YAMLError` where the text
    is not YAML, and `BeyondLimits` where a document is beyond what Distributary reads."""
    loader = _KubectlLoader(text)
    try:
        number = 0
        while loader.check_node():
            number += 1
            node = loader.get_node()
            if node is not None:
                check_aliases(node)
            repeated = list(_repeated_keys(node, "", set())) if node is not None else []
            document = loader.construct_document(node) if node is not None else None
            yield number, document, repeated
    finally:
        loader.dispose()
