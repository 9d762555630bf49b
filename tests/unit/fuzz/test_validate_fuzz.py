"""`distributary validate` over 1,000 mutated examples: never a traceback, exit status 0 or 1, and
each problem one line that names its file.

A failure names the seed and the mutation, so it can be replayed on its own (`mutations.py`).
"""

from __future__ import annotations

import re
import shutil
import traceback
from pathlib import Path

from click.testing import CliRunner, Result
from tests.unit.fuzz.mutations import examples, mutations, rendered

from distributary.cli import main

# A problem quotes at most a name or two and a value, each cut short (`api.quoted`): a line longer
# than this echoes a huge value whole.
LONGEST_LINE = 2_000
SUMMARY = re.compile(r"^error: (?:(\d+) problems? found|no Distributary resources found in .+)$")


def test_the_examples_before_mutation_are_valid(tmp_path: Path) -> None:
    for name, files in examples().items():
        folder = _written(tmp_path / name, rendered(files))
        result = CliRunner().invoke(main, ["validate", str(folder)])
        assert result.exit_code == 0, result.stderr


def test_validate_reports_every_mutation_in_one_line_per_problem(tmp_path: Path) -> None:
    failures: list[str] = []
    runner = CliRunner()
    for mutation in mutations():
        folder = _written(tmp_path / "pipeline", mutation.files)
        result = runner.invoke(main, ["validate", str(folder)])
        wrong = _wrong(result, folder)
        if wrong is not None:
            failures.append(f"{mutation.replay()}: {wrong}")
    assert not failures, f"{len(failures)} mutation(s) failed:\n" + "\n".join(failures[:10])


def _written(folder: Path, files: dict[str, str]) -> Path:
    """`folder` holding only `files` (one folder for every mutation: a huge value is written
    once, not kept a thousand times)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, "utf-8")
    return folder


def raised(exc: BaseException) -> str:
    """An exception in one line: its type, the last place in Distributary it passed, and its
    message."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/distributary/" in f.filename] or frames
    where = f" at {ours[-1].filename}:{ours[-1].lineno}" if ours else ""
    return f"raised {type(exc).__name__}{where}: {str(exc)[:300]!r}"


def _wrong(result: Result, folder: Path) -> str | None:
    """What is wrong with how validate answered, or None when it answered as documented."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return raised(result.exception)
    if "Traceback" in result.stdout + result.stderr:
        return "printed a traceback"
    if result.exit_code == 0:
        valid = result.stdout.startswith("valid: ") and result.stdout.count("\n") == 1
        return None if valid and not result.stderr else f"exit 0 with {result.output!r}"
    if result.exit_code != 1:
        return f"exit status {result.exit_code}, not 0 or 1"
    if result.stdout:
        return f"printed {result.stdout!r} on stdout while failing"
    return _wrong_report(result.stderr, folder)


def _wrong_report(stderr: str, folder: Path) -> str | None:
    """What is wrong with the problems printed on stderr: the last line sums them up, every
    other line is one problem that starts with the file it is in."""
    if not stderr.endswith("\n"):
        return f"stderr does not end a line: {stderr[-200:]!r}"
    *problems, summary = stderr.removesuffix("\n").split("\n")
    counted = SUMMARY.match(summary)
    if counted is None:
        return f"last line is not a summary: {summary[:200]!r}"
    if counted.group(1) is not None and int(counted.group(1)) != len(problems):
        return f"{summary!r} but {len(problems)} problem line(s): a problem spans lines"
    for line in problems:
        file, _, message = line.partition(": ")
        if not file.startswith(f"{folder}/") or not message.strip():
            return f"a problem line that names no file or says nothing: {line[:200]!r}"
        if len(line) > LONGEST_LINE:
            return f"a problem line of {len(line)} characters: {line[:200]!r}"
    return None
