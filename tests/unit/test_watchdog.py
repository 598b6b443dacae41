"""chaos.watchdog: the progress watchdog's bound and decision, and how the liveness check judges a run it ended.

Hand-built histories (tests/unit/test_checkers.py's builders): steady at T0, a merge every 0.5 s; bring-up 5 s
before steady, so the start-up is 5 s and the round 0.5 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.checkers import CheckInput, run_checks
from chaos.checkers.bounds import RunPace, derive_bound, run_pace
from chaos.checkers.liveness import check_liveness
from chaos.history import EventTail, History, Stalled, StalledPhase
from chaos.scenario import Checks, Liveness
from chaos.watchdog import FIRST_MERGE_S, Progress, stalled, watchdog_bound
from tests.unit.test_checkers import FACTS, LEARNERS, T0, fault, history, merge, upload, without
from trainer import events as ev

BOUND = 3 * 5.0 + 25 * 0.5  # 3 × start-up + 25 × round: 27.5 s


def _stopped_at(t: float, **kw) -> History:
    """Merges every 0.5 s until ``t`` s after steady, then none; the run never finished."""
    return history(until=t, finished=False, final_loss=None, **kw)


def _progress(t: float) -> Progress:
    return Progress(merges=int(t * 2), tokens=640 * int(t * 2), at=T0 + t)


# ---- the bound ----------------------------------------------------------------------------------------------------
def test_the_bound_is_three_start_ups_and_the_liveness_checks_rounds_of_this_runs_pace() -> None:
    pace = RunPace(startup_s=5.0, round_s=0.5, intervals=40)
    b = watchdog_bound(pace)
    assert b.seconds == pytest.approx(BOUND)
    assert b.how == "3 × start-up 5.0s + 25 × round 0.50s, measured in this run"
    liveness_limit = derive_bound(None, pace, startups=0, rounds=Liveness().rounds).seconds
    assert b.seconds is not None and liveness_limit is not None
    assert b.seconds > liveness_limit  # a run it ends has gone longer without a merge than liveness allows
    # It follows the run's own pace: a machine twice as slow gets twice the bound.
    assert watchdog_bound(RunPace(10.0, 1.0, 40)).seconds == pytest.approx(2 * BOUND)
    assert watchdog_bound(pace, Liveness(rounds=50)).seconds == pytest.approx(15 + 25)


def test_the_bound_takes_a_fixed_liveness_gap_and_falls_back_to_the_start_up_for_an_unmeasured_round() -> None:
    fixed = watchdog_bound(RunPace(5.0, 0.5, 40), Liveness(max_gap_s=60))
    assert fixed.seconds == pytest.approx(75.0) and "max_gap_s 60.0s" in fixed.how
    rough = watchdog_bound(RunPace(5.0, None, 2))
    assert rough.seconds == pytest.approx(3 * 5 + 25 * 5) and "too few to measure" in rough.how
    first = watchdog_bound(RunPace(None, None, 0), first_merge_s=100)
    assert first.seconds == 100 and "first merge" in first.how


def test_progress_is_growth_of_merges_or_tokens_since_the_last_poll() -> None:
    p = Progress().observe(10, 6400, now=1.0)
    assert p.observe(10, 6400, now=2.0).at == 1.0  # nothing grew
    assert p.observe(10, 7000, now=2.0).at == 2.0  # tokens alone: learners still training
    assert p.observe(11, 6400, now=2.0).at == 2.0
    assert p.observe(5, 3200, now=2.0).at == 1.0  # a restored syncer's drop is no progress ...
    assert p.observe(5, 3200, now=2.0).observe(6, 3200, now=3.0).at == 3.0  # ... growth after it is


# ---- the decision -------------------------------------------------------------------------------------------------
def test_a_run_without_progress_past_its_bound_is_stalled() -> None:
    h = _stopped_at(10.0)
    assert run_pace(h).round_s == pytest.approx(0.5)
    assert stalled(h, _progress(10.0), T0 + 10 + BOUND - 0.1) is None
    s = stalled(h, _progress(10.0), T0 + 10 + BOUND + 0.1)
    assert s is not None and s.first_merge
    assert s.since == pytest.approx(T0 + 10) and s.bound_s == pytest.approx(BOUND)
    assert s.quiet_s == pytest.approx(BOUND + 0.1) and s.merges == 20
    assert s.how == watchdog_bound(run_pace(h)).how


def test_no_stall_while_a_fault_is_in_effect_and_the_clock_restarts_at_its_heal() -> None:
    during = _stopped_at(10.0, records=fault("p", "pause", LEARNERS, 10.0, None))
    assert stalled(during, _progress(10.0), T0 + 10 + 10 * BOUND) is None  # a pause may stop training on purpose
    healed = _stopped_at(10.0, records=fault("p", "pause", LEARNERS, 10.0, 60.0))
    assert stalled(healed, _progress(10.0), T0 + 60 + BOUND - 0.1) is None
    s = stalled(healed, _progress(10.0), T0 + 60 + BOUND + 0.1)
    assert s is not None and s.since == pytest.approx(T0 + 60)


def test_a_failed_heal_ends_the_window_but_a_heal_in_progress_does_not() -> None:
    ops = fault("p", "partition", LEARNERS, 10.0, 20.0)
    failed = [*ops[:3], ops[3].model_copy(update={"outcome": "fail"})]
    s = stalled(_stopped_at(10.0, records=failed), _progress(10.0), T0 + 20 + BOUND + 1)
    assert s is not None  # the harness can do no more: the run is ended and judged, not left to its timeout
    assert stalled(_stopped_at(10.0, records=ops[:3]), _progress(10.0), T0 + 20 + BOUND + 1) is None


def test_the_watchdog_stands_down_once_the_budget_is_reached() -> None:
    done = history(until=10.0)  # ``finished`` at 10.2 s: a settle phase ends at its own deadline
    assert stalled(done, _progress(10.0), T0 + 10 + 10 * BOUND) is None


def test_a_run_without_a_first_merge_stalls_at_the_first_merge_cap() -> None:
    h = history(steady=False, until=0, finished=False, final_loss=None)
    up = T0 - 5
    assert stalled(h, Progress(0, 9000, at=up + 100), up + FIRST_MERGE_S - 1) is None
    s = stalled(h, Progress(0, 9000, at=up + 100), up + FIRST_MERGE_S + 1)  # tokens grew: still no first merge
    assert s is not None and not s.first_merge and s.since == up and s.bound_s == FIRST_MERGE_S


# ---- the liveness check on a stalled run --------------------------------------------------------------------------
def _stall_record(h: History, t: float, now: float) -> StalledPhase:
    s = stalled(h, _progress(t), now)
    assert s is not None
    return StalledPhase(ts=now, detail=s)


def _with(h: History, *records) -> History:
    return History(sorted([*h.records, *records], key=lambda r: r.ts), h.events)


def test_liveness_fails_a_stalled_run_naming_who_was_not_taking_part_and_the_last_merge() -> None:
    # learner-1 drops out at 10 s (refused as a stale incarnation); the others upload for a round that never merges.
    refused = [
        ev.Reject(
            ts=T0 + t,
            source="syncer",
            call="Upload",
            reason="stale_incarnation",
            detail="",
            learner_id="learner-1",
        )
        for t in (12.0, 30.0)
    ]
    pending = [upload(10.3, "learner-0"), upload(10.4, "learner-2")]
    h = _stopped_at(10.0, events=[*refused, *pending])
    h = _with(h, _stall_record(h, 10.0, T0 + 10 + BOUND + 0.5))
    v = check_liveness(CheckInput(h, FACTS, Checks(), baseline_final_loss=None))
    assert v.status == "fail", v.summary
    assert v.evidence["not_taking_part"] == ["learner-1"]
    learners, stall = v.evidence["learners"], v.evidence["stalled"]
    assert isinstance(learners, dict) and isinstance(stall, dict), v.evidence
    one = learners["learner-1"]
    assert one["last_merged_s"] == 10.0 and one["last_upload_s"] == pytest.approx(9.8)
    assert one["last_seen_s"] == 30.0 and one["refused_since_last_merge"] == {"stale_incarnation": 2}
    assert v.evidence["last_merge"] == {"s": 10.0, "merges_total": 20, "fragment": 0}
    assert stall["bound_s"] == pytest.approx(BOUND)
    for words in (
        "learner-1 (last merged +10.0s",
        "2 call(s) refused since (stale_incarnation)",
        "Last merge +10.0s (merges_total 20)",
        "3 × start-up 5.0s + 25 × round 0.50s",
    ):
        assert words in v.summary, v.summary


def test_an_upload_of_a_replaced_incarnation_or_a_learner_out_by_a_fault_is_not_taking_part() -> None:
    # Everyone uploads for the round after the last merge (10 s); then learner-1 restarts as a new incarnation that
    # the syncer never takes, and learner-2 is partitioned off and stays so (its heal failed).
    after = [upload(10.3, lid) for lid in LEARNERS]
    restart = ev.LearnerStart(
        ts=T0 + 15,
        source="learner-1",
        learner_id="learner-1",
        learner_incarnation="learner-1-b",
        pid=3,
        syncer="127.0.0.1:1",
        config_hash="abc",
    )
    ops = fault("p", "partition", ["learner-2"], 12.0, 13.0)
    cut = [*ops[:3], ops[3].model_copy(update={"outcome": "fail"})]
    h = _stopped_at(10.0, events=[*after, restart], records=cut)
    h = _with(h, _stall_record(h, 10.0, T0 + 13 + BOUND + 0.5))
    v = check_liveness(CheckInput(h, FACTS, Checks(), baseline_final_loss=None))
    assert v.status == "fail" and v.evidence["not_taking_part"] == ["learner-1", "learner-2"], v.summary
    who = v.evidence["learners"]
    assert isinstance(who, dict), v.evidence
    assert who["learner-1"]["incarnation"] == "learner-1-b" and not who["learner-1"]["uploaded_since_last_merge"]
    assert who["learner-2"]["out_by_a_fault"] and who["learner-2"]["uploaded_since_last_merge"]
    assert not who["learner-0"]["out_by_a_fault"] and who["learner-0"]["uploaded_since_last_merge"]


def test_a_stalled_run_is_judged_by_liveness_even_when_the_scenario_switched_it_off() -> None:
    h = _stopped_at(10.0, who=without("learner-2"))
    h = _with(h, _stall_record(h, 10.0, T0 + 40.0))
    off = Checks(liveness=Liveness(enabled=False))
    verdicts = {v.name: v for v in run_checks(CheckInput(h, FACTS, off, baseline_final_loss=None))}
    assert verdicts["liveness"].status == "fail"
    assert verdicts["liveness"].evidence["not_taking_part"] == list(
        LEARNERS
    )  # nobody uploaded after the last merge
    assert "liveness" not in {v.name for v in run_checks(CheckInput(_stopped_at(10.0), FACTS, off, None))}


def test_a_run_that_never_merged_fails_liveness_instead_of_being_undecided() -> None:
    h = history(steady=False, until=0, finished=False, final_loss=None)
    assert check_liveness(CheckInput(h, FACTS, Checks(), None)).status == "indeterminate"  # no watchdog record
    s = Stalled(
        since=T0 - 5,
        quiet_s=241.0,
        bound_s=FIRST_MERGE_S,
        how="the first-merge cap",
        merges=0,
        tokens=0,
        first_merge=False,
    )
    v = check_liveness(CheckInput(_with(h, StalledPhase(ts=T0 + 236, detail=s)), FACTS, Checks(), None))
    assert v.status == "fail" and "never reached a first merge" in v.summary
    assert v.evidence["not_taking_part"] == list(LEARNERS) and "No merge at all" in v.summary


def test_the_stalled_record_reads_back_from_the_controllers_file(tmp_path: Path) -> None:
    s = Stalled(since=1.0, quiet_s=30.0, bound_s=27.5, how="x", merges=3, tokens=9, first_merge=True)
    (tmp_path / "controller.jsonl").write_text(StalledPhase(ts=31.0, detail=s).model_dump_json() + "\n")
    assert History.read(tmp_path).stalled() == s


# ---- the controller's view of the syncer's events ------------------------------------------------------------------
def _merge_counts(events: list[ev.Event]) -> list[int]:
    """The merges_total of each event read (the tail here is asked for merges only)."""
    counts = []
    for e in events:
        assert isinstance(e, ev.Merge), e
        counts.append(e.merges_total)
    return counts


def test_the_event_tail_reads_complete_lines_of_the_kinds_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "syncer.jsonl"
    tail = EventTail(path, kinds=("merge",))
    assert tail.read() == []  # no file yet
    m1, m2 = merge(1.0, 1, LEARNERS).model_dump_json(), merge(2.0, 2, LEARNERS).model_dump_json()
    path.write_text(upload(0.5, "learner-0").model_dump_json() + "\n" + m1 + "\n" + m2[:40])  # a torn last line
    assert _merge_counts(tail.read()) == [1]
    with open(path, "a") as f:
        f.write(m2[40:] + "\n")
    assert _merge_counts(tail.read()) == [1, 2]
