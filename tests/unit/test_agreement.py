"""The agreement check (chaos.checkers.agreement): units that hold one committed version hold the same bits; a
version made again after a restart of the whole system is a new one; nothing shared is undecided, not a pass."""

from __future__ import annotations

from chaos.checkers.agreement import agreement
from trainer import events as ev


def _start(ts: float, who: str) -> ev.LearnerStart:
    return ev.LearnerStart(
        ts=ts, source=who, learner_id=who, learner_incarnation=f"{who}.{ts}", pid=1, syncer="", config_hash=""
    )


def _apply(ts: float, who: str, version: int, digest: str, fragment: int = 0) -> ev.Apply:
    return ev.Apply(ts=ts, source=who, fragment=fragment, version=version, step=1, digest=digest)


def test_units_holding_one_version_agree() -> None:
    log: list[ev.Event] = [_start(0, "a"), _start(0, "b"), _apply(1, "a", 1, "x"), _apply(1, "b", 1, "x")]
    log.append(_apply(2, "a", 2, "y"))
    v = agreement(log)
    assert v.status == "pass" and v.evidence["compared"] == 1 and v.evidence["versions"] == 2, v


def test_a_unit_that_diverged_fails_naming_both() -> None:
    """Negative control: one group steps from stale state (another digest for the same committed version)."""
    log: list[ev.Event] = [_start(0, "a"), _start(0, "b"), _apply(1, "a", 1, "x"), _apply(1, "b", 1, "z")]
    v = agreement(log)
    assert v.status == "fail" and "fragment 0 v1 (epoch 0): a holds x, b holds z" in v.summary, v


def test_a_state_fetch_is_held_too() -> None:
    log: list[ev.Event] = [
        _start(0, "a"),
        _apply(1, "a", 3, "x"),
        _start(2, "b"),
        ev.StateFetch(ts=3, source="b", versions=[3], seconds=0.1, digests=["w"]),
    ]
    v = agreement(log)
    assert v.status == "fail" and "b holds w" in v.summary, v


def test_a_whole_restart_starts_a_new_epoch() -> None:
    stop = ev.LearnerStop(ts=2, source="a", why="finished", step=1, tokens=1)
    log: list[ev.Event] = [
        _start(0, "a"),
        _apply(1, "a", 1, "x"),
        stop,
        _start(3, "a"),
        _apply(4, "a", 1, "y"),
        _start(4.5, "b"),
        _apply(5, "b", 1, "y"),
    ]
    v = agreement(log)
    assert v.status == "pass" and v.evidence["epochs"] == 2, v


def test_nothing_shared_is_undecided() -> None:
    log: list[ev.Event] = [_start(0, "a"), _apply(1, "a", 1, "x")]
    v = agreement(log)
    assert v.status == "indeterminate", v
