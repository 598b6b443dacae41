"""The event schema and its documentation agree, and events round-trip."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainer import events as ev

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def test_every_kind_is_documented_with_its_fields():
    text = DOC.read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z_]+)` \|.*$", text, re.M)}
    assert set(rows) == set(ev.EVENT_KINDS), set(rows) ^ set(ev.EVENT_KINDS)
    for model in ev._Event.__subclasses__():
        kind = model.model_fields["kind"].default
        for field in model.model_fields:
            if field not in ("ts", "source", "kind"):
                assert f"`{field}`" in rows[kind], f"field {field!r} of {kind!r} is not documented"


def test_round_trip_and_torn_last_line(tmp_path):
    log = ev.EventLog(tmp_path / "x.jsonl", "learner-0")
    log.emit(ev.Apply(fragment=1, version=2, step=3))
    log.emit(ev.LearnerStop(why="finished", step=3, tokens=10))
    log.close()
    with open(tmp_path / "x.jsonl", "a") as fh:
        fh.write('{"ts": 1.0, "kind": "ap')  # a writer killed mid-line
    got = ev.read_events(tmp_path / "x.jsonl")
    assert [e.kind for e in got] == ["apply", "learner_stop"]
    assert got[0].source == "learner-0" and got[0].version == 2


def test_invalid_line_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"kind": "nope", "ts": 1}\n{"kind": "apply"}\n')
    with pytest.raises(ev.EventError, match=r"bad.jsonl:1"):
        ev.read_events(p)
