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


def _join(ts: float, who: str, version: int) -> ev.LearnerJoin:
    return ev.LearnerJoin(
        ts=ts,
        source=who,
        learner_incarnation=f"{who}.{ts}",
        incarnation_index=0,
        versions=[version],
        syncer_incarnation="s",
    )


def test_a_restart_from_scratch_starts_a_new_epoch_and_a_live_rejoin_does_not() -> None:
    """A unit killed mid-run logs no stop: a later start from scratch (a join at version 0 after versions were held)
    makes versions anew; a unit that rejoins a live system joins at its current version and is compared."""
    log: list[ev.Event] = [
        _start(0, "a"),
        _start(0, "b"),
        _join(0.5, "a", 0),
        _apply(1, "a", 1, "x"),
        _apply(1, "b", 1, "x"),
        _join(2, "b", 1),
        _apply(3, "b", 1, "x"),
    ]
    assert agreement(log).evidence["epochs"] == 1
    log += [_start(9, "b"), _join(10, "b", 0), _apply(11, "b", 1, "y")]  # the others long gone: from scratch
    v = agreement(log)
    assert v.status == "pass" and v.evidence["epochs"] == 2, v
    log.append(_apply(12, "a", 1, "z"))  # a unit of the new epoch holding other bits than b's
    assert agreement(log).status == "fail"


def test_nothing_shared_is_undecided() -> None:
    log: list[ev.Event] = [_start(0, "a"), _apply(1, "a", 1, "x")]
    v = agreement(log)
    assert v.status == "indeterminate", v
