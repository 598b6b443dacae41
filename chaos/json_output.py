"""``--json [PATH]``: a command's result as JSON, on stdout or in a file, for scripts and CI.

With ``--json`` alone (or ``--json -``) stdout carries the JSON document and nothing else: for the length of the
command, :func:`json_mode` sends what it prints for people (progress, verdict lines) to stderr. With a PATH the
JSON goes there and stdout stays as it is.

Example:
    >>> import io, contextlib
    >>> out = io.StringIO()
    >>> with contextlib.redirect_stdout(out), json_mode(STDOUT):
    ...     print("progress: for people")
    ...     emit_json(STDOUT, {"status": "pass"})
    >>> out.getvalue()
    '{\\n  "status": "pass"\\n}\\n'
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

STDOUT = "-"
_targets: list[TextIO] = []  # the real stdout while json_mode has moved the human text to stderr


def add_json_argument(parser, what: str = "the result") -> None:  # noqa: ANN001 - a parser or argument group
    """``--json [PATH]``, the same on every command that has it."""
    parser.add_argument(
        "--json",
        nargs="?",
        const=STDOUT,
        metavar="PATH",
        help=f"{what} as JSON: on stdout (people's text goes to stderr), or in PATH",
    )


@contextlib.contextmanager
def json_mode(dest: str | None) -> Iterator[None]:
    """While a command runs with ``--json`` to stdout, its prints go to stderr (the JSON keeps stdout)."""
    if dest != STDOUT:
        yield
        return
    _targets.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _targets.pop()


def emit_json(dest: str | None, payload: object) -> None:
    """Write ``payload`` as JSON to stdout (``-``) or to the file ``dest``; nothing when ``dest`` is None."""
    if not dest:
        return
    text = json.dumps(payload, indent=2, default=str) + "\n"
    if dest == STDOUT:
        out = _targets[-1] if _targets else sys.stdout
        out.write(text)
        out.flush()
    else:
        Path(dest).write_text(text, encoding="utf-8")
