"""The mutations of a view's SQL and a Log's DDL schema: truncated, nested deeply, identifiers
swapped or replaced by unknown names, keywords or repeats. Kept apart from the mutations of the
documents (`mutations.py`) because they read the text as SQL tokens, not as YAML values."""

from __future__ import annotations

import random
import re
from typing import Any

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def query(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """A view's SQL or a Log's schema truncated, nested deeply or with identifiers swapped."""
    spec = document.get("spec") if isinstance(document, dict) else None
    fields = [
        f for f in ("sql", "schema") if isinstance(spec, dict) and isinstance(spec.get(f), str)
    ]
    if not fields:
        return None
    assert isinstance(spec, dict)
    field = rng.choice(fields)
    text, change = _sql_change(rng, spec[field])
    spec[field] = text
    return document, f"{change} in spec.{field}"


def _sql_change(rng: random.Random, text: str) -> tuple[str, str]:
    words = list(IDENTIFIER.finditer(text))
    kind = rng.choice(("truncate", "nest", "nest", "swap", "swap", "unknown", "keyword", "repeat"))
    if kind == "truncate" or not words:
        at = rng.randrange(len(text) + 1)
        return text[:at], f"truncate at {at}"
    word = rng.choice(words)
    if kind == "nest":
        depth = rng.choice((31, 32, 33, 64, 200, 1000))
        inner = "(" * depth + word.group() + ")" * depth
        return text[: word.start()] + inner + text[
            word.end() :
        ], f"nest {word.group()} {depth} deep"
    if kind == "swap":
        other = rng.choice(words)
        first, second = sorted((word, other), key=lambda m: m.start())
        if first.start() == second.start():
            return text, "swap nothing"
        swapped = (
            text[: first.start()]
            + second.group()
            + text[first.end() : second.start()]
            + first.group()
            + text[second.end() :]
        )
        return swapped, f"swap {first.group()} and {second.group()}"
    new = {
        "unknown": rng.choice(("nowhere", "`odd name`", "\u00e9t\u00e9", "x" * 300)),
        "keyword": rng.choice(("SELECT", "FROM", "WHERE", "GROUP BY", "NOT NOT NOT", ",", ";")),
        "repeat": f"{word.group()} {word.group()}",
    }[kind]
    return text[: word.start()] + new + text[word.end() :], f"replace {word.group()} by {new!r}"
