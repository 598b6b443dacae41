"""Generated sections of a Markdown document: a table drawn from a results file, between marker comments.

A section opens with ``<!-- NAME:begin (rendered from SOURCE by COMMAND; do not edit by hand) -->`` and closes with
``<!-- NAME:end -->``; everything outside the markers is the document's own. A renderer replaces the section's body
and a per-change test checks the document equals what the results file renders to (docs/ci-tiers.md: the tier
timings; tests/mutants/render.py draws the mutant matrix the same way).

Example:
    >>> text = "intro\\n<!-- t:begin (old) -->\\nstale\\n<!-- t:end -->\\nafter\\n"
    >>> print(replace(text, "t", "| a |", source="r.json", command="`make`"))
    intro
    <!-- t:begin (rendered from r.json by `make`; do not edit by hand) -->
    | a |
    <!-- t:end -->
    after
    <BLANKLINE>
    >>> replace("no markers", "t", "x", source="r.json", command="`make`")
    Traceback (most recent call last):
    ...
    ValueError: no '<!-- t:begin …' … '<!-- t:end -->' markers in the document
"""

from __future__ import annotations

import re


def begin(name: str, source: str, command: str) -> str:
    return f"<!-- {name}:begin (rendered from {source} by {command}; do not edit by hand) -->"


def end(name: str) -> str:
    return f"<!-- {name}:end -->"


def pattern(name: str) -> re.Pattern[str]:
    """A whole section, markers included."""
    return re.compile(rf"<!-- {re.escape(name)}:begin[^\n]*-->\n.*?<!-- {re.escape(name)}:end -->", re.S)


def replace(text: str, name: str, body: str, *, source: str, command: str) -> str:
    """``text`` with its section ``name`` holding ``body``."""
    if not pattern(name).search(text):
        raise ValueError(f"no '<!-- {name}:begin …' … '{end(name)}' markers in the document")
    return pattern(name).sub(lambda _: f"{begin(name, source, command)}\n{body}\n{end(name)}", text, count=1)


def outside(text: str) -> str:
    """``text`` without any generated section: what a person wrote.

    >>> outside("a\\n<!-- x:begin (r) -->\\nb\\n<!-- x:end -->\\nc")
    'a\\n\\nc'
    """
    return re.sub(r"<!-- ([\w-]+):begin[^\n]*-->\n.*?<!-- \1:end -->", "", text, flags=re.S)
