"""The pipeline drawn as a graph: Mermaid for Markdown and GitHub, DOT for Graphviz.

Logs are drawn as cylinders (they are stored data), views as rounded boxes, jobs as boxes with
double sides; an edge from a log to a reader carries the alias it is read under. Node ids are
derived from the kind, namespace and name so two resources never share one, and the drawing is
deterministic (the pipeline's topological order) so it can be committed and diffed.
"""

from __future__ import annotations

import re
from typing import Literal

from distributary.graph import Pipeline, Ref

DiagramFormat = Literal["mermaid", "dot"]


def _node_id(ref: Ref) -> str:
    kinds = {"Log": "log", "DerivedView": "view", "StreamJob": "job", "Source": "source",
             "Sink": "sink"}  # fmt: skip
    kind = kinds.get(ref.kind, "node")
    return f"{kind}_{re.sub(r'[^A-Za-z0-9]', '_', ref.namespace)}_" + re.sub(
        r"[^A-Za-z0-9]", "_", ref.name
    )


def _label(pipeline: Pipeline, ref: Ref) -> str:
    namespaces = {r.namespace for r in pipeline.order}
    name = ref.name if len(namespaces) <= 1 else f"{ref.namespace}/{ref.name}"
    if ref in pipeline.views:
        output = pipeline.views[ref].spec.output
        return (
            f"{name}\\n{output.mode}"
            if output.mode == "append"
            else f"{name}\\nupsert by " + (", ".join(output.key or []))
        )
    if ref in pipeline.sinks:
        target, cache = pipeline.sinks[ref].spec.postgres, pipeline.sinks[ref].spec.redis
        if target is not None:
            return f"{name}\\n{target.mode} into {target.table}"
        return f"{name}\\nRedis {cache.key_prefix if cache else ''}<key>"
    if ref in pipeline.captures:
        return f"{name}\\nPostgreSQL {pipeline.captures[ref].spec.postgres.database}"
    return name


def _edge_label(pipeline: Pipeline, source: Ref, target: Ref) -> str | None:
    if source.kind == "Log" and target in pipeline.views:
        aliases = [i.alias for i in pipeline.views[target].spec.inputs if i.log == source.name]
        return ", ".join(aliases) or None
    return None


def to_mermaid(pipeline: Pipeline) -> str:
    """The pipeline as a Mermaid flowchart, left to right."""
    lines = ["flowchart LR"]
    for ref in pipeline.order:
        label = _label(pipeline, ref).replace('"', "'").replace("\\n", "<br/>")
        if ref.kind == "Log":
            shape = f'[("{label}")]'
        elif ref.kind == "DerivedView":
            shape = f'("{label}")'
        elif ref.kind == "Source":
            shape = f'{{{{"{label}"}}}}'
        elif ref.kind == "Sink":
            shape = f'[/"{label}"/]'
        else:
            shape = f'[["{label}"]]'
        lines.append(f"    {_node_id(ref)}{shape}")
    for source, target in pipeline.edges:
        text = _edge_label(pipeline, source, target)
        arrow = f"-- {text} -->" if text else "-->"
        lines.append(f"    {_node_id(source)} {arrow} {_node_id(target)}")
    return "\n".join(lines) + "\n"


def to_dot(pipeline: Pipeline) -> str:
    """The pipeline as a Graphviz digraph, left to right."""
    shapes = {"Log": "cylinder", "DerivedView": "box", "StreamJob": "box3d", "Source": "hexagon",
              "Sink": "folder"}  # fmt: skip
    lines = ["digraph pipeline {", "    rankdir=LR;", '    node [fontname="Helvetica"];']
    for ref in pipeline.order:
        style = ', style="rounded"' if ref.kind == "DerivedView" else ""
        label = _label(pipeline, ref).replace('"', '\\"')
        lines.append(f'    {_node_id(ref)} [label="{label}", shape={shapes[ref.kind]}{style}];')
    for source, target in pipeline.edges:
        text = _edge_label(pipeline, source, target)
        attrs = f' [label="{text}"]' if text else ""
        lines.append(f"    {_node_id(source)} -> {_node_id(target)}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def draw(pipeline: Pipeline, fmt: DiagramFormat) -> str:
    """The pipeline in the given format."""
    return to_mermaid(pipeline) if fmt == "mermaid" else to_dot(pipeline)
