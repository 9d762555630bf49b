"""Seeded mutations of the example pipelines, for the fuzz tests.

Each mutation is made from the seed and its own index alone, so one that finds a crash is replayed
without the ones before it: `DISTRIBUTARY_FUZZ_SEED=S DISTRIBUTARY_FUZZ_INDEX=I`. A mutation takes
one example folder, picks one document and changes it one to three times, each change at a path in
the document: a field dropped, renamed or written twice, a value of another type, an extreme
number, unicode, a huge string, lists or mappings nested deeply, a misspelt apiVersion or kind, a
name taken from elsewhere in the pipeline, or SQL (and DDL) truncated, nested or with identifiers
swapped. The mutated folder is kept both as YAML text (what `distributary validate` reads) and as
the documents themselves (what the operator's planners get from the API server).

No example has a StreamJob, so one is added to the clickstream example here, beside a Log for it to
write, so that the job's planner is fuzzed too.
"""

from __future__ import annotations

import copy
import os
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tests.unit.fuzz.query_mutations import query

SEED_ENV = "DISTRIBUTARY_FUZZ_SEED"
INDEX_ENV = "DISTRIBUTARY_FUZZ_INDEX"
CASES_ENV = "DISTRIBUTARY_FUZZ_CASES"
DEFAULT_SEED = 20261124
DEFAULT_CASES = 1000

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

JOB_FILE = "jobs.yaml"
JOB_DOCUMENTS = """\
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata:
  name: alerts
spec:
  partitions: 1
  schema: "user_id STRING, reason STRING"
---
apiVersion: distributary.dev/v1alpha1
kind: StreamJob
metadata:
  name: alerter
spec:
  image: shop/alerter:1
  mainApplicationFile: local:///app/job.py
  arguments: ["--threshold", "10"]
  env:
    MODE: strict
  inputs:
    - log: views-per-user
  outputs:
    - log: alerts
"""

HUGE = 100_000
DEEP = 200
EXTREMES: tuple[Any, ...] = (
    0,
    -1,
    2**63,
    -(2**63) - 1,
    2**64,
    1e308,
    -1e308,
    float("inf"),
    float("nan"),
    "nan",
    "inf",
    "-0",
    "1e308",
    0.5,
)
UNICODE = (
    "\u202eevil\u202c",  # right-to-left override
    "\u05e9\u05dc\u05d5\u05dd",  # Hebrew
    "\U0001f984\U0001f525",  # emoji
    "\x00",  # NUL
    "e\u0301\u0301\u0301",  # combining marks
    "\u200b\ufeff",  # zero-width space, byte-order mark
    "\u0130\u0131\u00df",  # letters whose case changes their length
    "line\nbreak",
    "tab\there",
    "\u2028\u2029\x85",  # line and paragraph separators
    "'\"`\\",
)
MISSPELT_API_VERSIONS = (
    "distributary.dev/v1",
    "distributary.dev/v1alpha2",
    "distributry.dev/v1alpha1",
    "Distributary.dev/v1alpha1",
    "distributary.dev",
    "v1",
    "apps/v1",
    "",
    "distributary.dev/v1alpha1 ",
)
MISSPELT_KINDS = ("log", "Logs", "Derivedview", "DerivedViews", "Streamjob", "View", "", "Log ")
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's, where there is one: faster


@dataclass(frozen=True)
class Mutation:
    """One mutated example folder: its documents by file, and what was changed."""

    seed: int
    index: int
    example: str
    by_file: dict[str, list[Any]]
    steps: tuple[str, ...]
    repeated: tuple[tuple[str, int, tuple[str, ...]], ...] = ()

    @property
    def documents(self) -> tuple[Any, ...]:
        """Every document of the folder, as the API server would hand them over."""
        return tuple(d for documents in self.by_file.values() for d in documents)

    @property
    def files(self) -> dict[str, str]:
        """Each file's YAML text (with the keys `repeat` chose written twice), by file name."""
        texts = rendered(self.by_file)
        for name, number, path in self.repeated:
            texts[name] = _repeat_key(texts[name], number, path)
        return texts

    def replay(self) -> str:
        """Where the mutation comes from and how to make it again, in one line."""
        return (
            f"seed {self.seed}, mutation {self.index} of examples/{self.example} "
            f"({'; '.join(self.steps)}); replay with {SEED_ENV}={self.seed} "
            f"{INDEX_ENV}={self.index}"
        )


def seed() -> int:
    """The seed: `DISTRIBUTARY_FUZZ_SEED`, else a fixed one, so a run is the same every time."""
    return int(os.environ.get(SEED_ENV) or DEFAULT_SEED)


def indexes() -> range:
    """The mutations to make: the one `DISTRIBUTARY_FUZZ_INDEX` names, else the first
    `DISTRIBUTARY_FUZZ_CASES` (1,000 unless set)."""
    only = os.environ.get(INDEX_ENV)
    if only:
        return range(int(only), int(only) + 1)
    return range(int(os.environ.get(CASES_ENV) or DEFAULT_CASES))


def examples() -> dict[str, dict[str, list[Any]]]:
    """Every example folder's YAML files and their documents, by folder and file name."""
    found: dict[str, dict[str, list[Any]]] = {}
    for folder in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        files = {
            path.name: [d for d in yaml.safe_load_all(path.read_text("utf-8")) if d is not None]
            for path in sorted(folder.glob("*.yaml"))
        }
        if files:
            found[folder.name] = files
    found["clickstream"][JOB_FILE] = list(yaml.safe_load_all(JOB_DOCUMENTS))
    return found


def mutations() -> Iterator[Mutation]:
    """The mutations `indexes()` names, made from `seed()`."""
    corpus, chosen = examples(), seed()
    for index in indexes():
        yield mutate(corpus, chosen, index)


def mutate(corpus: dict[str, dict[str, list[Any]]], seed: int, index: int) -> Mutation:
    """Mutation `index` of `seed`: it depends on nothing else, so it can be made on its own."""
    rng = random.Random(f"{seed}:{index}")
    example = rng.choice(sorted(corpus))
    files = copy.deepcopy(corpus[example])
    name = rng.choice(sorted(files))
    documents = files[name]
    number = rng.randrange(len(documents))
    names = sorted(_strings(corpus[example]))
    steps: list[str] = []
    repeated: list[tuple[str, int, tuple[str, ...]]] = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        operator = rng.choice(OPERATORS)
        result = operator(rng, documents[number], names)
        if result is None:
            continue
        documents[number], step = result
        if step.startswith("repeat "):
            repeated.append((name, number, tuple(step.removeprefix("repeat ").split("."))))
        steps.append(f"{name} document {number + 1}: {step}")
    return Mutation(seed, index, example, files, tuple(steps) or ("unchanged",), tuple(repeated))


Operator = Callable[[random.Random, Any, list[str]], "tuple[Any, str] | None"]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _paths(item, (*path, position))


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def _shown(path: tuple[Any, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else ("." if text else "") + str(part)
    return text or "(the document)"


def _replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _get(document, path[:-1])[path[-1]] = value
    return document


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value} if len(value) < 40 else set()
    if isinstance(value, dict):
        return set().union(*(_strings(v) for v in value.values()), set())
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value), set())
    return set()


def _inner_path(rng: random.Random, document: Any) -> tuple[Any, ...] | None:
    paths = [p for p in _paths(document) if p]
    return rng.choice(paths) if paths else None


def drop(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """A field or list item removed."""
    path = _inner_path(rng, document)
    if path is None:
        return None
    del _get(document, path[:-1])[path[-1]]
    return document, f"drop {_shown(path)}"


def _other_type(rng: random.Random, value: Any) -> Any:
    choices: list[Any] = [
        "text",
        "",
        "7",
        "true",
        7,
        0,
        True,
        False,
        None,
        [],
        ["a", 1],
        {},
        {"a": 1},
        [value],
        {"value": value},
        str(value)[:200],
    ]
    return rng.choice([c for c in choices if type(c) is not type(value)])


def retype(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """A value (or the whole document) replaced by one of another type."""
    path = rng.choice(list(_paths(document)))
    new = _other_type(rng, _get(document, path))
    return _replaced(document, path, new), f"retype {_shown(path)} to {_brief(new)}"


def extreme(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """A value replaced by an extreme number (or one written as text)."""
    path = _inner_path(rng, document)
    if path is None:
        return None
    new = rng.choice(EXTREMES)
    return _replaced(document, path, new), f"set {_shown(path)} to {new!r}"


def unicode(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """Unicode put into a string, or in place of a value."""
    path = _inner_path(rng, document)
    if path is None:
        return None
    old, text = _get(document, path), rng.choice(UNICODE)
    if isinstance(old, str) and old:
        at = rng.randrange(len(old) + 1)
        new = old[:at] + text + old[at:]
    else:
        new = text
    return _replaced(document, path, new), f"put {text!r} in {_shown(path)}"


def huge(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """A value replaced by a string of 100,000 characters."""
    path = _inner_path(rng, document)
    if path is None:
        return None
    old = _get(document, path)
    unit = old if isinstance(old, str) and old else rng.choice(("x", "ab-", "é", "\U0001f984"))
    new = (unit * (HUGE // len(unit) + 1))[:HUGE]
    return _replaced(document, path, new), f"set {_shown(path)} to {HUGE} characters"


def deep(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """A value replaced by lists or mappings nested 200 deep."""
    path = _inner_path(rng, document)
    if path is None:
        return None
    lists = rng.random() < 0.5
    new: Any = "leaf"
    for _ in range(DEEP):
        new = [new] if lists else {"a": new}
    what = "lists" if lists else "mappings"
    return _replaced(document, path, new), f"nest {what} {DEEP} deep at {_shown(path)}"


def _mapping_paths(document: Any) -> list[tuple[Any, ...]]:
    return [p for p in _paths(document) if p and isinstance(p[-1], str)]


def repeat(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """A key written twice in its mapping (in the YAML text only: a mapping holds a key once)."""
    paths = [p for p in _mapping_paths(document) if all(isinstance(k, str) for k in p)]
    if not paths:
        return None
    return document, f"repeat {'.'.join(rng.choice(paths))}"


def _misspelt(rng: random.Random, word: str) -> str:
    if len(word) < 2:
        return word + "s"
    at = rng.randrange(len(word) - 1)
    changes = (
        word[:at] + word[at + 1] + word[at] + word[at + 2 :],
        word[:at] + word[at + 1 :],
        word + "s",
        word.lower(),
        word.upper(),
        word[:at] + "_" + word[at:],
    )
    return rng.choice([c for c in changes if c != word] or [word + "s"])


def rename(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """A field's key misspelt (or given another type)."""
    paths = _mapping_paths(document)
    if not paths:
        return None
    path = rng.choice(paths)
    parent, key = _get(document, path[:-1]), path[-1]
    new: Any = rng.choice((_misspelt(rng, key), _misspelt(rng, key), 1, True, ""))
    parent[new] = parent.pop(key)
    return document, f"rename {_shown(path)} to {new!r}"


def misplace(rng: random.Random, document: Any, _: list[str]) -> tuple[Any, str] | None:
    """The apiVersion or kind misspelt."""
    if not isinstance(document, dict):
        return None
    field = rng.choice(("apiVersion", "kind"))
    new = rng.choice(MISSPELT_API_VERSIONS if field == "apiVersion" else MISSPELT_KINDS)
    document[field] = new
    return document, f"set {field} to {new!r}"


def borrow(rng: random.Random, document: Any, names: list[str]) -> tuple[Any, str] | None:
    """A string replaced by another string of the same example: a name, alias, column or
    setting where another is expected (a cycle, a collision, a view reading itself)."""
    paths = [p for p in _paths(document) if p and isinstance(_get(document, p), str)]
    if not paths or not names:
        return None
    path, new = rng.choice(paths), rng.choice(names)
    return _replaced(document, path, new), f"set {_shown(path)} to {new!r}"


OPERATORS: tuple[Operator, ...] = (
    drop,
    retype,
    extreme,
    unicode,
    huge,
    deep,
    repeat,
    rename,
    misplace,
    borrow,
    query,
    query,
)


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def rendered(files: dict[str, list[Any]]) -> dict[str, str]:
    """Each file's documents written as YAML, by file name."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * DEEP))  # PyYAML writes nested values recursively
    try:
        return {
            name: "---\n".join(
                yaml.dump(d, Dumper=DUMPER, sort_keys=False, allow_unicode=True, width=2**31 - 1)
                for d in documents
            )
            for name, documents in files.items()
        }
    finally:
        sys.setrecursionlimit(limit)


def _repeat_key(text: str, number: int, path: tuple[str, ...]) -> str:
    """`text` with the line of `path`'s key in document `number` written twice (YAML keeps the
    last, the same value: only validate's check of repeated keys sees the difference)."""
    chunks = text.split("---\n")
    if number >= len(chunks):
        return text
    lines = chunks[number].split("\n")
    indent, at = 0, 0
    for key in path:
        prefix = " " * indent + f"{key}:"
        found = next(
            (i for i in range(at, len(lines)) if lines[i].startswith(prefix)),
            None,
        )
        if found is None:
            return text
        at, indent = found, indent + 2
    lines.insert(at, lines[at])
    chunks[number] = "\n".join(lines)
    return "---\n".join(chunks)
