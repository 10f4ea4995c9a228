"""Comments and docstrings in ``ilargi/`` say why, without a machine's timings or the project's
work history: a timing in a comment goes stale unseen and cannot be checked by its reader. The
figures live in benchmarks/RESULTS.md with their commands; the history lives in git."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ilargi"

# A number with a unit of time or throughput ("0.7 ms", "85 s", "3 GB/s"), a measured ratio
# ("1.8x"), or a before → after pair ("7.0 -> 2.9").
TIMING = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|seconds?|min|minutes?)\b(?!-)"
    r"|(?<![\w.])\d+(?:\.\d+)?\s?[GMT](?:i?B|FLOP)/s\b"
    r"|(?<![\w.])\d+(?:\.\d+)?x\b"
    r"|\d+(?:\.\d+)?\s?(?:→|->)\s?\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s)?\b"
)
HISTORY = re.compile(
    r"\b(?:issues? #?\d+|sessions?|previously|used to (?:be|run|take|have)|"
    r"formerly|this round|we tried|TODO|FIXME|XXX)\b",
    re.IGNORECASE,
)


def _texts(path):
    """(line, text) of every comment and docstring line of a module."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            in_example = False  # a doctest's output is the code's, not a claim of the comment
            for offset, line in enumerate((docstring or "").splitlines()):
                in_example = line.lstrip().startswith(">>>") or (in_example and line.strip())
                if not in_example:
                    yield node.body[0].lineno + offset, line


def _offences(path):
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {match.group(0)!r} in {text.strip()!r}"
        for line, text in _texts(path)
        for match in (TIMING.search(text), HISTORY.search(text))
        if match
    ]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda path: str(path.relative_to(PACKAGE))
)
def test_no_timing_or_history_in_comments(path):
    assert not _offences(path), "\n".join(_offences(path))


@pytest.mark.parametrize(
    "text",
    [
        "# ran 2.8 ms",
        "# 1.8x slower",
        "# 7.0 -> 2.9 ms",
        "# 3 GB/s",
        "# since issue 41",
        "# previously a loop",
        "# 85 s of one core",
        "# it used to take longer",
    ],
)
def test_the_scan_finds_what_it_is_for(text):
    assert TIMING.search(text) or HISTORY.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "# 2 x·c",
        "# logistic regression",
        "# float64",
        "# 1e-9",
        "# 4 columns",
        "# rows 0..n-1",
        "# O(n) passes",
        "# 128 KiB",
        "# the norms used to center",
        "# then no longer fits",
    ],
)
def test_the_scan_leaves_the_rest(text):
    assert not (TIMING.search(text) or HISTORY.search(text))
