"""chaos.checkers: each checker passes, fails (and is indeterminate where defined) on hand-built histories."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from chaos.checkers import CHECKERS, CheckInput, RunFacts, Verdict, run_checks
from chaos.checkers.bounds import run_pace
from chaos.checkers.durability import check_durability
from chaos.checkers.goodput import check_goodput
from chaos.checkers.liveness import check_liveness
from chaos.checkers.parity import check_parity
from chaos.checkers.reference import check_reference
from chaos.checkers.reintegration import check_reintegration
from chaos.checkers.safety import check_safety
from chaos.history import FaultOp, History, Phase
from chaos.scenario import Checks, Goodput, Liveness, Parity, Reintegration
from trainer import events as ev

T0 = 1000.0  # the steady phase: every time below is seconds after it
LEARNERS = ("learner-0", "learner-1", "learner-2")
FACTS = RunFacts(learners=LEARNERS, min_quorum=1, checkpoint_every_merges=10, num_fragments=1)
Who = Callable[[float], Iterable[str]]


# ---- builders --------------------------------------------------------------------------------------------------
def inc(lid: str) -> str:
    return f"{lid}-a"


def upload(t: float, lid: str, fragment: int = 0, incarnation: str | None = None) -> ev.Upload:
    return ev.Upload(
        ts=T0 + t,
        source="syncer",
        learner_id=lid,
        learner_incarnation=incarnation or inc(lid),
        fragment=fragment,
        base_version=0,
        bytes=1024,
        seconds=0.01,
        c_steps=8,
        c_tokens=640,
        duplicate=False,
    )


def merge(
    t: float,
    n: int,
    who: Iterable[str],
    fragment: int = 0,
    version: int | None = None,
    c_tokens: int = 640,
    grad_norm: float = 0.5,
    base: int = -1,
) -> ev.Merge:
    parts = [
        ev.ParticipantInfo(
            learner_id=lid, incarnation=inc(lid), weight=1.0, c_steps=8, c_tokens=c_tokens, base_version=base
        )
        for lid in who
    ]
    v = n if version is None else version
    return ev.Merge(
        ts=T0 + t,
        source="syncer",
        fragment=fragment,
        version=v,
        base_version=v - 1,
        participants=parts,
        rule="rda",
        wait_s=0.1,
        quorum_wait_s=0.0,
        outer_grad_norm=grad_norm,
        merges_total=n,
        tokens_total=640 * n,
    )


def syncer_start(t: float, restored: int = -1) -> ev.SyncerStart:
    return ev.SyncerStart(
        ts=T0 + t,
        source="syncer",
        syncer_incarnation=f"s-{t}",
        address="127.0.0.1:1",
        config_hash="abc",
        versions=[0],
        restored_from_merges=restored,
        pid=1,
    )


def eval_(t: float, loss: float, final: bool = False, n: int = 0) -> ev.Eval:
    return ev.Eval(
        ts=T0 + t,
        source="syncer",
        merges_total=n,
        versions=[n],
        loss=loss,
        loss_floor=1.0,
        tokens_total=640 * n,
        final=final,
    )


def fault(
    fid: str,
    kind: str,
    targets: Iterable[str],
    start: float,
    end: float | None,
    params: dict[str, Any] | None = None,
) -> list[FaultOp]:
    """The controller records of one fault: inject (invoke, ok) at ``start``, heal (invoke, ok) at ``end``."""
    common = dict(fault_id=fid, fault_kind=kind, targets=list(targets), params=params or {})
    ops = [
        FaultOp(ts=T0 + start - 0.01, action="inject", outcome="invoke", **common),
        FaultOp(ts=T0 + start, action="inject", outcome="ok", **common),
    ]
    if end is not None:
        ops += [
            FaultOp(ts=T0 + end - 0.01, action="heal", outcome="invoke", **common),
            FaultOp(ts=T0 + end, action="heal", outcome="ok", **common),
        ]
    return ops


def history(
    until: float = 30.0,
    who: Who = lambda t: LEARNERS,
    gaps: Iterable[tuple[float, float]] = (),
    records: Iterable[Any] = (),
    events: Iterable[Any] = (),
    steady: bool = True,
    final_loss: float | None = 2.5,
    finished: bool = True,
) -> History:
    """A run: steady at T0, a merge every 0.5 s up to ``until`` (none strictly inside a gap), each participant
    uploading 0.2 s before it; a final eval and ``finished`` just after ``until``."""
    recs: list[Any] = [Phase(ts=T0 - 5, name="bring_up")]
    if steady:
        recs.append(Phase(ts=T0, name="steady"))
    recs += list(records)
    evs: list[Any] = [syncer_start(-4.0)]
    evs += [
        ev.LearnerStart(
            ts=T0 - 3,
            source=lid,
            learner_id=lid,
            learner_incarnation=inc(lid),
            pid=2,
            syncer="127.0.0.1:1",
            config_hash="abc",
        )
        for lid in LEARNERS
    ]
    n = 0
    for k in range(1, int(until * 2) + 1):
        t = k * 0.5
        if any(a < t < b for a, b in gaps):
            continue
        parts = list(who(t))
        if not parts:
            continue
        n += 1
        evs += [upload(t - 0.2, lid) for lid in parts]
        evs.append(merge(t, n, parts))
    if final_loss is not None:
        evs.append(eval_(until + 0.1, final_loss, final=True, n=n))
    if finished:
        evs.append(
            ev.Finished(ts=T0 + until + 0.2, source="syncer", tokens_total=640 * n, merges_total=n, versions=[n])
        )
    evs += list(events)
    return History(records=sorted(recs, key=lambda r: r.ts), events=sorted(evs, key=lambda e: e.ts))


def check(
    fn: Callable[[CheckInput], Any],
    h: History,
    checks: Checks | None = None,
    baseline: float | None = 2.5,
    facts: RunFacts = FACTS,
):
    return fn(CheckInput(h, facts, checks or Checks(), baseline_final_loss=baseline))


def without(*out: str) -> Who:
    return lambda t: [lid for lid in LEARNERS if lid not in out]


def test_the_default_history_passes_every_check() -> None:
    verdicts = run_checks(CheckInput(history(), FACTS, Checks(), baseline_final_loss=2.5))
    on_by_default = [name for name in CHECKERS if name != "reference"]  # reference costs a run: asked for
    assert [v.name for v in verdicts] == on_by_default
    # no learner step events: goodput has nothing to measure; no merge digests: nothing for the audit to recompute
    assert {v.name: v.status for v in verdicts} == {
        **{name: "pass" for name in on_by_default},
        "goodput": "indeterminate",
        "audit": "indeterminate",
        "ledger": "indeterminate",
    }


# ---- reference (synchronous DiLoCo at equal tokens) ---------------------------------------------------------------
def _reference(h: History, ref: float | None, tolerance: float = 0.05):
    checks = Checks.model_validate({"reference": {"enabled": True, "tolerance": tolerance}})
    return check_reference(CheckInput(h, FACTS, checks, baseline_final_loss=None, reference_final_loss=ref))


def test_reference_passes_within_tolerance_and_when_better() -> None:
    assert _reference(history(final_loss=2.53), 2.5).status == "pass"
    v = _reference(history(final_loss=2.2), 2.5)
    assert v.status == "pass" and v.evidence["delta"] == pytest.approx(-0.3)


def test_reference_negative_control_fails_a_trainer_worse_than_synchronous_diloco() -> None:
    # The decoupled trainer before rounds: 2.58–2.75 where synchronous DiLoCo reached 2.40–2.47 (reference_parity).
    v = _reference(history(final_loss=2.58), 2.42)
    assert v.status == "fail" and "synchronous DiLoCo" in v.summary and v.evidence["delta"] == pytest.approx(0.16)


def test_reference_cannot_decide_without_a_reference_or_a_final_eval() -> None:
    assert _reference(history(), None).status == "indeterminate"
    assert _reference(history(final_loss=None, finished=False), 2.5).status == "indeterminate"
    assert _reference(history(final_loss=float("nan")), 2.5).status == "fail"


def test_every_check_runs_when_enabled() -> None:
    checks = Checks.model_validate({"reference": {"enabled": True}})
    verdicts = run_checks(CheckInput(history(), FACTS, checks, baseline_final_loss=2.5, reference_final_loss=2.5))
    assert [v.name for v in verdicts] == list(CHECKERS)


# ---- liveness --------------------------------------------------------------------------------------------------
def test_liveness_regular_merges_pass() -> None:
    v = check(check_liveness, history())
    assert v.status == "pass"
    assert v.evidence["merges"] == 60
    assert v.evidence["longest_gap_s"] == pytest.approx(0.5)


def test_liveness_gap_without_faults_fails_naming_the_gap() -> None:
    v = check(check_liveness, history(gaps=[(5, 25)]))
    assert v.status == "fail"
    assert "20.0s" in v.summary and "starting 5.0s after steady state" in v.summary
    assert v.evidence["longest_gap_while_reachable_s"] == pytest.approx(20.0)
    assert v.evidence["gap_starts_s"] == pytest.approx(5.0)


def test_liveness_gap_while_every_learner_is_partitioned_is_not_owed() -> None:
    h = history(gaps=[(5, 25)], records=fault("p", "partition", LEARNERS, 5.1, 24.5))
    v = check(check_liveness, h)
    assert v.status == "pass", v.summary
    assert v.evidence["longest_gap_s"] == pytest.approx(20.0)
    assert v.evidence["longest_gap_while_reachable_s"] < 1.0


def test_liveness_min_reachable_decides_whether_merges_are_owed() -> None:
    # two of three cut off: learner-2 alone could have kept merges going
    h = history(gaps=[(5, 25)], records=fault("p", "partition", ["learner-0", "learner-1"], 5.1, 24.5))
    assert check(check_liveness, h).status == "fail"
    owed_two = Checks(liveness=Liveness(min_reachable=2))
    assert check(check_liveness, h, owed_two).status == "pass"


def test_liveness_a_healed_learner_counts_as_back_at_its_first_upload() -> None:
    cut = fault("p", "partition", LEARNERS, 5.1, 10.0)
    # healed at 10 s but nobody uploads until 24.8 s: nothing owed, the gap is excused
    quiet = history(gaps=[(5, 25)], records=cut)
    assert check(check_liveness, quiet, Checks(liveness=Liveness(max_gap_s=10))).status == "pass"
    # learner-2 uploads at 11 s yet nothing merges until 25 s: 14 s owed
    back = history(gaps=[(5, 25)], records=cut, events=[upload(11.0, "learner-2")])
    v = check(check_liveness, back, Checks(liveness=Liveness(max_gap_s=10)))
    assert v.status == "fail"
    assert v.evidence["longest_gap_while_reachable_s"] == pytest.approx(14.0, abs=0.2)


def test_liveness_gap_during_a_syncer_crash_passes() -> None:
    h = history(
        gaps=[(5, 25)],
        records=fault("c", "syncer_crash", ["syncer"], 5.1, 24.0),
        events=[syncer_start(24.3, restored=10)],
    )
    v = check(check_liveness, h)
    assert v.status == "pass", v.summary
    assert v.evidence["longest_gap_while_reachable_s"] < 1.0


def test_liveness_without_steady_phase_is_indeterminate() -> None:
    assert check(check_liveness, history(steady=False)).status == "indeterminate"


def test_liveness_unfinished_run_counts_the_stall_to_its_end() -> None:
    h = history(until=10, finished=False, final_loss=None, events=[eval_(40.0, 2.7)])
    v = check(check_liveness, h)
    assert v.status == "fail"
    assert v.evidence["longest_gap_s"] == pytest.approx(30.0)


# ---- bounds in the run's own units (chaos.checkers.bounds) -----------------------------------------------------
def _every(period: float) -> Who:
    """A cluster that merges every ``period`` seconds (a multiple of the builder's 0.5 s)."""
    k = round(period / 0.5)
    return lambda t: LEARNERS if round(t * 2) % k == 0 else []


def test_run_pace_measures_start_up_and_the_round_time_outside_faults() -> None:
    h = history(who=_every(1.0), gaps=[(5, 25)], records=fault("p", "partition", LEARNERS, 5.1, 24.0))
    p = run_pace(h)
    assert p.startup_s == pytest.approx(5.0)  # bring_up at T0 - 5, steady at T0
    assert p.round_s == pytest.approx(1.0)  # the 20 s gap the partition caused is not a round
    assert p.intervals == 9  # 1 s … 5 s and 25 s … 30 s


def test_liveness_bound_follows_the_clusters_pace() -> None:
    cut = fault("p", "partition", LEARNERS, 5.1, 10.0)
    owed = [upload(11.0, "learner-2")]  # nothing merges from 11 s to 25 s: 14 s owed
    fast = check(check_liveness, history(gaps=[(5, 25)], records=cut, events=owed))
    assert fast.status == "fail" and "25 × round 0.50s" in fast.summary  # limit 12.5 s
    assert fast.evidence["max_gap_s"] == pytest.approx(12.5)
    assert fast.evidence["bound"]["how"].endswith("measured in this run")
    # The same 14 s stall in a cluster whose rounds take twice as long (a loaded machine) is within its bound.
    slow = check(check_liveness, history(who=_every(1.0), gaps=[(5, 25)], records=cut, events=owed))
    assert slow.status == "pass", slow.summary
    assert slow.evidence["max_gap_s"] == pytest.approx(25.0)


def test_reintegration_bound_adds_start_ups_and_rounds() -> None:
    h = history(who=_back_at("learner-1", 5, 30), records=fault("k", "kill", ["learner-1"], 5, 10))
    v = check(check_reintegration, h)  # back 20 s after the heal; bound 3 × 5 s + 25 × 0.5 s = 27.5 s
    assert v.status == "pass", v.summary
    assert v.evidence["within_s"] == pytest.approx(27.5) and "3 × start-up 5.0s" in v.summary
    tight = check(check_reintegration, h, Checks(reintegration=Reintegration(startups=1, rounds=10)))
    assert tight.status == "fail" and "limit 10.0s" in tight.summary


def test_a_bound_the_run_cannot_measure_is_indeterminate_not_guessed() -> None:
    # Two merges in all: no round time. A fixed bound in seconds still decides.
    h = history(until=1.0, records=fault("k", "kill", ["learner-1"], 0.6, 0.8), events=[merge(5.0, 3, LEARNERS)])
    assert run_pace(h).round_s is None
    for fn in (check_liveness, check_reintegration):
        v = check(fn, h)
        assert v.status == "indeterminate" and "give the bound in seconds" in v.summary, v.summary
    fixed = Checks(liveness=Liveness(max_gap_s=10), reintegration=Reintegration(within_s=10))
    assert check(check_liveness, h, fixed).status == "pass"
    assert check(check_reintegration, h, fixed).status == "pass"


def test_reintegration_needs_some_derived_bound() -> None:
    with pytest.raises(ValueError, match="give within_s"):
        Reintegration(startups=0, rounds=0)


# ---- reintegration ---------------------------------------------------------------------------------------------
def _back_at(lid: str, out: float, back: float) -> Who:
    return lambda t: [x for x in LEARNERS if not (x == lid and out <= t < back)]


def test_reintegration_merged_again_soon_after_heal_passes() -> None:
    h = history(
        who=_back_at("learner-1", 5, 13), records=fault("k", "kill", ["learner-1"], 5, 10, {"restart": True})
    )
    v = check(check_reintegration, h)
    assert v.status == "pass", v.summary
    (row,) = v.evidence["learners"]
    assert row["learner"] == "learner-1" and row["fault_id"] == "k"
    assert row["seconds"] == pytest.approx(3.0)


def test_reintegration_too_slow_fails() -> None:
    h = history(who=_back_at("learner-1", 5, 20), records=fault("k", "kill", ["learner-1"], 5, 10))
    v = check(check_reintegration, h, Checks(reintegration=Reintegration(within_s=5)))
    assert v.status == "fail"
    assert "10.0s" in v.summary


def test_reintegration_clock_stops_while_other_faults_act_on_the_learner() -> None:
    """Killed, healed at 10, then throttled 11–20 and the syncer down 22–24: back at 30 is 20 s after the heal but
    9 s of free time, inside a 10 s bound. The same faults on another learner stop no clock (negative control)."""
    kill = fault("k", "kill", ["learner-1"], 5, 10)
    later = [
        *fault("b", "bandwidth", ["learner-1"], 11, 20, {"rate_kbps": 50, "direction": "both"}),
        *fault("c", "syncer_crash", ["syncer"], 22, 24),
    ]
    tight = Checks(reintegration=Reintegration(within_s=10))
    h = history(
        who=_back_at("learner-1", 5, 30),
        gaps=[(22, 24.5)],
        records=[*kill, *later],
        events=[syncer_start(24.2, restored=10)],
    )
    row = next(r for r in check(check_reintegration, h, tight).evidence["learners"] if r["fault_id"] == "k")
    assert (
        row["status"] == "pass" and row["seconds"] == pytest.approx(20.0) and row["free_s"] == pytest.approx(9.0)
    )
    elsewhere = [*fault("b", "bandwidth", ["learner-2"], 11, 20, {"rate_kbps": 50, "direction": "both"})]
    v = check(check_reintegration, history(who=_back_at("learner-1", 5, 30), records=[*kill, *elsewhere]), tight)
    assert v.status == "fail" and "merged again only after 20.0s" in v.summary, v.summary
    assert v.evidence["learners"][0]["free_s"] == pytest.approx(20.0)


def test_reintegration_undecided_while_other_faults_leave_too_little_free_time() -> None:
    # Never back; the run ends 30 s after the heal but a partition held it for 25 of them: 5 s free < 10 s bound.
    recs = [*fault("k", "kill", ["learner-1"], 5, 10), *fault("p", "partition", ["learner-1"], 12, 37)]
    h = history(until=40, who=_back_at("learner-1", 5, 100), records=recs)
    v = check(check_reintegration, h, Checks(reintegration=Reintegration(within_s=10)))
    row = next(r for r in v.evidence["learners"] if r["fault_id"] == "k")
    assert row["status"] == "indeterminate" and "free of other faults" in row["why"], row


def test_reintegration_never_merged_again_fails() -> None:
    h = history(until=80, who=without("learner-1"), records=fault("k", "kill", ["learner-1"], 5, 10))
    v = check(check_reintegration, h)
    assert v.status == "fail"
    assert "learner-1" in v.summary and "k" in v.summary


def test_reintegration_run_ending_right_after_heal_is_indeterminate() -> None:
    h = history(until=10.8, who=_back_at("learner-1", 5, 100), records=fault("k", "kill", ["learner-1"], 5, 10))
    v = check(check_reintegration, h)
    assert v.status == "indeterminate", v.summary
    assert v.evidence["learners"][0]["status"] == "indeterminate"


def test_reintegration_decides_in_the_settle_phase_after_the_budget() -> None:
    # The budget is reached 0.8 s after the heal; the syncer settles on (merging) until learner-1 is merged again.
    settle = [
        upload(19.8, "learner-1"),
        merge(20.0, 99, list(LEARNERS)),
        ev.Settled(ts=T0 + 20.5, source="syncer", seconds=9.5, awaited=[], merges_total=99),
    ]
    h = history(
        until=10.8,
        who=_back_at("learner-1", 5, 100),
        records=fault("k", "kill", ["learner-1"], 5, 10),
        events=settle,
    )
    v = check(check_reintegration, h)
    assert v.status == "pass", v.summary
    assert v.evidence["learners"][0]["seconds"] == pytest.approx(10.0)
    # Settled without it (the settle time ran out): decided too, as a failure once the bound has passed.
    gone = [ev.Settled(ts=T0 + 60.0, source="syncer", seconds=49.0, awaited=["learner-1"], merges_total=21)]
    h = history(
        until=10.8,
        who=_back_at("learner-1", 5, 100),
        records=fault("k", "kill", ["learner-1"], 5, 10),
        events=gone,
    )
    assert check(check_reintegration, h).status == "fail"


def test_reintegration_kill_without_restart_fails() -> None:
    h = history(who=without("learner-1"), records=fault("k", "kill", ["learner-1"], 5, 10, {"restart": False}))
    v = check(check_reintegration, h)
    assert v.status == "fail"
    assert "never healed" in v.summary


def test_reintegration_unhealed_fault_fails() -> None:
    h = history(who=without("learner-0"), records=fault("p", "partition", ["learner-0"], 5, None))
    v = check(check_reintegration, h)
    assert v.status == "fail" and "never healed" in v.summary


@pytest.mark.parametrize(
    "kind, params",
    [
        ("bandwidth", {"rate_kbps": 10, "direction": "both"}),
        ("latency", {"latency_ms": 200, "jitter_ms": 0}),
        ("slow", {"fraction": 0.5}),
        ("partition", {"direction": "from_syncer"}),
    ],
)
def test_reintegration_ignores_faults_that_keep_the_learner_contributing(kind: str, params: dict) -> None:
    h = history(records=fault("x", kind, ["learner-0"], 5, 10, params))
    v = check(check_reintegration, h)
    assert v.status == "pass"
    assert v.evidence["learners"] == []


def test_reintegration_ignores_slowing_the_syncer() -> None:
    """``slow`` on the syncer (allowed by the schema) takes no learner out, so nobody owes a reintegration
    (healed after the last merge, 0.15 s before the end: a syncer-crash reading would be indeterminate)."""
    h = history(records=fault("s", "slow", ["syncer"], 5, 30.05, {"fraction": 0.5, "period_s": 0.1}))
    v = check(check_reintegration, h)
    assert v.evidence["learners"] == []
    assert v.status == "pass"


def test_reintegration_after_syncer_crash_needs_every_learner() -> None:
    recs = fault("c", "syncer_crash", ["syncer"], 5, 8)
    ok = history(gaps=[(5, 9)], records=recs, events=[syncer_start(8.5, restored=10)])
    v = check(check_reintegration, ok)
    assert v.status == "pass" and {r["learner"] for r in v.evidence["learners"]} == set(LEARNERS)
    missing = history(until=80, gaps=[(5, 9)], who=lambda t: LEARNERS if t < 5 else ["learner-0"], records=recs)
    assert check(check_reintegration, missing).status == "fail"


def test_eventually_takes_its_reference_once_every_learner_is_in() -> None:
    """The CI false alarm (container run, a full real phase): the faults began 3 s after the first merge, while two
    learners were still starting, so the first one up took part in 82% of the merges before the first fault and 45%
    once all three trained — judged as staying out. Here learner-0 is alone for 15 s, then the three take part two at
    a time (each in 2/3 of the merges) before and after learner-2's disconnect: everyone is at its fault-free rate."""
    pairs = (("learner-0", "learner-1"), ("learner-1", "learner-2"), ("learner-2", "learner-0"))

    def who(t: float) -> Iterable[str]:
        if t < 15:
            return ["learner-0"]
        pair = pairs[int(round(t * 2)) % 3]
        return [lid for lid in pair if not (20 <= t <= 24 and lid == "learner-2")]

    h = history(until=120, who=who, records=fault("cut", "disconnect", ["learner-2"], 20, 24))
    v = check(check_reintegration, h)
    assert v.status == "pass", v.summary
    rows = {r["learner"]: r for r in v.evidence["eventually"]["learners"]}
    assert rows["learner-0"]["reference"] < 0.8  # not the 92% it had while alone
    # Negative control: a learner that really stays out after the fault still fails against that reference.
    out = history(
        until=120,
        who=lambda t: [x for x in who(t) if t < 20 or x != "learner-1"] or ["learner-0"],
        records=fault("cut", "disconnect", ["learner-2"], 20, 24),
    )
    bad = check(check_reintegration, out)
    assert bad.status == "fail" and "learner-1 in" in bad.summary, bad.summary


# ---- parity ----------------------------------------------------------------------------------------------------
def test_parity_within_tolerance_passes() -> None:
    v = check(check_parity, history(final_loss=2.6), baseline=2.5)
    assert v.status == "pass"
    assert v.evidence["delta"] == pytest.approx(0.1)


@pytest.mark.parametrize("loss", [2.7, 2.3])
def test_parity_outside_tolerance_fails(loss: float) -> None:
    v = check(check_parity, history(final_loss=loss), baseline=2.5)
    assert v.status == "fail"
    assert v.evidence["delta"] == pytest.approx(loss - 2.5)


def test_parity_tolerance_is_configurable() -> None:
    h = history(final_loss=2.7)
    assert check(check_parity, h, Checks(parity=Parity(tolerance=0.25)), baseline=2.5).status == "pass"


def test_parity_without_final_eval_is_indeterminate() -> None:
    h = history(final_loss=None, events=[eval_(15, 2.5)])  # a non-final eval does not count
    assert check(check_parity, h).status == "indeterminate"


@pytest.mark.parametrize("baseline", [None, math.nan])
def test_parity_without_baseline_is_indeterminate(baseline: float | None) -> None:
    v = check(check_parity, history(), baseline=baseline)
    assert v.status == "indeterminate" and "baseline" in v.summary


def test_parity_nan_final_loss_fails() -> None:
    assert check(check_parity, history(final_loss=math.nan), baseline=2.5).status == "fail"


def _banded(loss: float, band: tuple[float, ...], tolerance: float = 0.05):
    """Parity with fault-free runs whose final losses, at this run's floor (1.0), are ``band``."""
    excess = tuple(b - 1.0 for b in band)
    return check_parity(
        CheckInput(
            history(final_loss=loss),
            FACTS,
            Checks(parity=Parity(tolerance=tolerance)),
            baseline_final_loss=band[0],
            baseline_band=excess,
        )
    )


def test_parity_judges_against_the_band_the_fault_free_seeds_span() -> None:
    band = (2.50, 2.58, 2.46)  # the same-seed baseline first
    inside = _banded(2.60, band)  # 0.10 above the same-seed run, but only 0.02 above the band
    assert inside.status == "pass", inside.summary
    assert inside.evidence["outside_band"] == pytest.approx(0.02) and inside.evidence["delta"] == pytest.approx(
        0.10
    )
    assert "band 2.4600–2.5800 (floor 1.0000 + excess 1.4600–1.5800 over 3 seed(s))" in inside.summary
    assert inside.evidence["band"] == {
        "low": pytest.approx(2.46),
        "high": pytest.approx(2.58),
        "excess": pytest.approx([1.5, 1.58, 1.46]),
        "width": pytest.approx(0.12),
    }
    above, below = _banded(2.64, band), _banded(2.40, band)
    assert above.status == below.status == "fail"
    assert above.evidence["outside_band"] == pytest.approx(0.06) and below.evidence[
        "outside_band"
    ] == pytest.approx(-0.06)
    # Negative control: the band of one seed is the old single-baseline check and fails the run the band passes.
    one = _banded(2.60, band[:1])
    assert (
        one.status == "fail"
        and "the fault-free run 2.5000 (floor 1.0000 + excess 1.5000; one seed, no band)" in one.summary
    ), one.summary


def test_parity_on_real_text_bands_the_raw_losses() -> None:
    """Real text has no known floor (NaN) and one eval set for every seed: the band is the seeds' raw losses. Before
    this, a NaN floor made every band non-finite and parity indeterminate on every real-text run."""
    h = history(final_loss=None)
    last = max(e.ts for e in h.events)
    text = ev.Eval(
        ts=last + 0.1,
        source="syncer",
        merges_total=9,
        versions=[9],
        loss=2.6,
        loss_floor=math.nan,
        tokens_total=5760,
        final=True,
    )
    h = History(h.records, sorted([*h.events, text], key=lambda e: e.ts))
    band = (2.50, 2.58, 2.46)

    def judge(loss: float) -> Verdict:
        final = text.model_copy(update={"loss": loss})
        hist = History(h.records, [e if e is not text else final for e in h.events])
        return check_parity(
            CheckInput(
                hist, FACTS, Checks(parity=Parity(tolerance=0.05)), baseline_final_loss=2.5, baseline_band=band
            )
        )

    inside = judge(2.60)
    assert inside.status == "pass", inside.summary
    assert "band 2.4600–2.5800 over 3 seed(s) (real text" in inside.summary
    assert inside.evidence["loss_floor"] is None and "gap_to_floor" not in inside.evidence
    assert judge(2.64).status == "fail" and judge(2.40).status == "fail"


def test_parity_with_a_non_finite_baseline_in_the_band_is_indeterminate() -> None:
    assert _banded(2.5, (2.5, math.nan)).status == "indeterminate"


# ---- durability ------------------------------------------------------------------------------------------------
def test_durability_increasing_versions_pass() -> None:
    v = check(check_durability, history())
    assert v.status == "pass"
    assert v.evidence["restarts"] == [] and v.evidence["final_versions"] == {0: 60}


def test_durability_version_going_backwards_fails() -> None:
    h = history(until=5, events=[merge(5.3, 11, LEARNERS, version=4)])
    v = check(check_durability, h)
    assert v.status == "fail"
    assert "fragment 0: version 4 after 10" in v.summary


def test_durability_versions_are_per_fragment() -> None:
    h = history(until=5, events=[merge(5.3, 11, LEARNERS, fragment=1, version=1)])
    assert check(check_durability, h).status == "pass"


def _restart_after(merges: int, restored: int) -> History:
    """``merges`` merges (one every 0.5 s), a syncer restart restored from ``restored`` merges, then more merges
    whose versions continue past the old ones (the restore's version skip)."""
    t = merges * 0.5
    later = [merge(t + 2 + 0.5 * k, restored + k + 1, LEARNERS, version=merges + 100 + k) for k in range(4)]
    return history(until=t, events=[syncer_start(t + 1, restored=restored), *later])


def test_durability_restart_within_one_checkpoint_interval_passes() -> None:
    v = check(check_durability, _restart_after(25, 20))
    assert v.status == "pass", v.summary
    (r,) = v.evidence["restarts"]
    assert (r["merges_before"], r["restored_from_merges"], r["lost_merges"]) == (25, 20, 5)
    assert r["at_s"] > 0
    assert "1 syncer restart" in v.summary


def test_durability_restart_losing_more_than_an_interval_fails() -> None:
    v = check(check_durability, _restart_after(25, 10))
    assert v.status == "fail"
    assert "lost 15 merges" in v.summary


def test_durability_fresh_restart_after_merges_fails() -> None:
    v = check(check_durability, _restart_after(5, -1))
    assert v.status == "fail"
    assert "from scratch" in v.summary


# ---- safety ----------------------------------------------------------------------------------------------------
def test_safety_clean_run_passes() -> None:
    v = check(check_safety, history())
    assert v.status == "pass"
    assert v.evidence["unbacked_participants"] == 0


def test_safety_non_finite_checkpoint_fails() -> None:
    bad = ev.Checkpoint(
        ts=T0 + 10.1, source="syncer", merges_total=20, versions=[20], path="/x", seconds=0.1, params_finite=False
    )
    v = check(check_safety, history(events=[bad]))
    assert v.status == "fail" and "non-finite" in v.summary


@pytest.mark.parametrize("loss", [math.nan, math.inf])
def test_safety_non_finite_eval_loss_fails(loss: float) -> None:
    v = check(check_safety, history(events=[eval_(12.1, loss, n=24)]))
    assert v.status == "fail" and "eval loss" in v.summary


def test_safety_non_finite_outer_gradient_fails() -> None:
    h = history(until=5, events=[upload(5.2, "learner-0"), merge(5.3, 11, ["learner-0"], grad_norm=math.inf)])
    assert check(check_safety, h).status == "fail"


def test_safety_merge_participant_without_upload_fails() -> None:
    h = history(until=5, events=[merge(5.3, 11, ["learner-0"])])  # the uploads before it went into merge 10
    v = check(check_safety, h)
    assert v.status == "fail"
    assert v.evidence["unbacked_participants"] == 1
    assert "learner-0" in v.summary


def test_safety_upload_of_another_incarnation_does_not_back_a_participant() -> None:
    h = history(
        until=5, events=[upload(5.2, "learner-0", incarnation="learner-0-b"), merge(5.3, 11, ["learner-0"])]
    )
    assert check(check_safety, h).status == "fail"


def test_safety_upload_of_another_fragment_does_not_back_a_participant() -> None:
    h = history(until=5, events=[upload(5.2, "learner-0", fragment=1), merge(5.3, 11, ["learner-0"])])
    assert check(check_safety, h).status == "fail"


def test_safety_counts_rejects_in_evidence() -> None:
    rejects = [
        ev.Reject(
            ts=T0 + 3.1 + i,
            source="syncer",
            call="Sync",
            reason=reason,
            detail="",
            learner_id="learner-1",
            fragment=0,
            base_version=1,
        )
        for i, reason in enumerate(["non_finite", "non_finite", "stale"])
    ]
    v = check(check_safety, history(events=rejects))
    assert v.status == "pass"
    assert v.evidence["rejected_uploads"] == {"non_finite": 2, "stale": 1}
    assert "3 rejected" in v.summary


# ---- goodput ---------------------------------------------------------------------------------------------------
def learner_start(t: float, lid: str, incarnation: str) -> ev.LearnerStart:
    return ev.LearnerStart(
        ts=T0 + t,
        source=lid,
        learner_id=lid,
        learner_incarnation=incarnation,
        pid=3,
        syncer="127.0.0.1:1",
        config_hash="abc",
    )


def step(t: float, lid: str, tokens: int) -> ev.Step:
    return ev.Step(
        ts=T0 + t, source=lid, step=tokens // 64, loss=3.0, tokens=tokens, step_time_s=0.01, blocked_s=0.0
    )


def stop(t: float, lid: str, tokens: int) -> ev.LearnerStop:
    return ev.LearnerStop(ts=T0 + t, source=lid, why="budget", step=tokens // 64, tokens=tokens)


def _goodput_history(merged_each: int, num_merges: int = 1) -> History:
    """learner-0 trains 1000 tokens (steps then stop); ``num_merges`` merges each carrying ``merged_each`` of it,
    each from the version the one before made (disjoint spans of its training)."""
    evs: list[ev.Event] = [
        learner_start(-3, "learner-0", "learner-0-a"),
        step(1, "learner-0", 500),
        stop(9, "learner-0", 1000),
    ]
    for n in range(1, num_merges + 1):
        evs += [upload(n - 0.1, "learner-0"), merge(n, n, ["learner-0"], c_tokens=merged_each, base=n - 1)]
    return History(records=[Phase(ts=T0, name="steady")], events=sorted(evs, key=lambda e: e.ts))


def test_goodput_above_min_passes() -> None:
    v = check(check_goodput, _goodput_history(400, num_merges=2), Checks(goodput=Goodput(min=0.7)))
    assert v.status == "pass"
    assert v.evidence["goodput"] == pytest.approx(0.8)
    assert v.evidence["trained_tokens"] == {"learner-0": 1000}
    assert v.evidence["merged_tokens"] == {"learner-0": 800}


def test_goodput_below_min_fails() -> None:
    v = check(check_goodput, _goodput_history(400, num_merges=1), Checks(goodput=Goodput(min=0.5)))
    assert v.status == "fail"
    assert v.evidence["goodput"] == pytest.approx(0.4)


def test_goodput_default_minimum_can_fail() -> None:
    """The default bound fails a run that threw away most of its work (5% merged) and passes a healthy one."""
    assert Goodput().min > 0
    stalled = check(check_goodput, _goodput_history(50))
    assert stalled.status == "fail" and "compute goodput 5.0%" in stalled.summary, stalled.summary
    assert check(check_goodput, _goodput_history(300)).status == "pass"


def test_goodput_divides_contributions_by_fragments() -> None:
    facts = RunFacts(learners=LEARNERS, min_quorum=1, checkpoint_every_merges=10, num_fragments=4)
    v = check(
        check_goodput, _goodput_history(1000, num_merges=4), facts=facts
    )  # each of 4 fragments carries it all
    assert v.evidence["goodput"] == pytest.approx(1.0)


def test_goodput_sums_incarnations() -> None:
    evs: list[ev.Event] = [
        learner_start(-3, "learner-0", "learner-0-a"),
        step(1, "learner-0", 600),
        step(2, "learner-0", 1000),
        learner_start(5, "learner-0", "learner-0-b"),
        step(6, "learner-0", 300),
        stop(8, "learner-0", 500),
        learner_start(-3, "learner-1", "learner-1-a"),
        stop(8, "learner-1", 500),
        upload(8.5, "learner-0"),
        upload(8.5, "learner-1"),
        merge(9, 1, ["learner-0", "learner-1"], c_tokens=500),
    ]
    h = History(records=[Phase(ts=T0, name="steady")], events=sorted(evs, key=lambda e: e.ts))
    v = check(check_goodput, h)
    assert v.evidence["trained_tokens"] == {"learner-0": 1500, "learner-1": 500}
    assert v.evidence["goodput"] == pytest.approx(1000 / 2000)


def test_goodput_counts_a_span_re_sent_from_one_base_once() -> None:
    """A learner that missed a round's result syncs again from the same base: the second contribution holds the
    first's tokens and more; merged tokens count the span once, so goodput stays ≤ 100%."""
    evs: list[ev.Event] = [learner_start(-3, "learner-0", "learner-0-a"), stop(9, "learner-0", 1000)]
    for n, tokens in ((1, 600), (2, 900)):
        evs += [upload(n - 0.1, "learner-0"), merge(n, n, ["learner-0"], c_tokens=tokens, base=0)]
    v = check(
        check_goodput, History(records=[Phase(ts=T0, name="steady")], events=sorted(evs, key=lambda e: e.ts))
    )
    assert v.evidence["merged_tokens"] == {"learner-0": 900} and v.status == "pass", v


def test_goodput_above_all_trained_fails() -> None:
    """Negative control: merges holding more of a learner's tokens than it trained (counters never reset)."""
    v = check(check_goodput, _goodput_history(700, num_merges=2))
    assert v.status == "fail" and "more tokens of learner-0 than they trained" in v.summary, v


def test_goodput_without_steps_is_indeterminate() -> None:
    assert check(check_goodput, history()).status == "indeterminate"


# ---- run_checks ------------------------------------------------------------------------------------------------
def test_run_checks_skips_disabled_checks() -> None:
    checks = Checks(parity=Parity(enabled=False), goodput=Goodput(enabled=False))
    verdicts = run_checks(CheckInput(history(), FACTS, checks, baseline_final_loss=None))
    assert [v.name for v in verdicts] == ["liveness", "reintegration", "durability", "safety", "audit", "ledger"]


def test_verdict_to_json() -> None:
    v = check(check_parity, history(final_loss=2.6))
    assert v.to_json() == {"name": "parity", "status": "pass", "summary": v.summary, "evidence": v.evidence}


# ---- safety: an update merged twice --------------------------------------------------------------------------
def _merge_of(t: float, n: int, base: int, lid: str = "learner-0", rnd: int = 0) -> ev.Merge:
    part = ev.ParticipantInfo(
        learner_id=lid, incarnation=inc(lid), weight=1.0, c_steps=8, c_tokens=640, base_version=base, round=rnd
    )
    return ev.Merge(
        ts=T0 + t,
        source="syncer",
        fragment=0,
        version=n,
        base_version=n - 1,
        participants=[part],
        rule="rda",
        wait_s=0.1,
        quorum_wait_s=0.0,
        outer_grad_norm=0.5,
        merges_total=n,
        tokens_total=640 * n,
    )


def _safety(events: list[Any]) -> Any:
    h = History([Phase(ts=T0, name="steady")], [syncer_start(-4.0), *events])
    return check_safety(CheckInput(h, FACTS, Checks(), 2.5))


def test_safety_fails_when_the_same_update_is_merged_twice() -> None:
    v = _safety(
        [upload(1.0, "learner-0"), _merge_of(1.1, 1, base=0), upload(2.0, "learner-0"), _merge_of(2.1, 2, base=0)]
    )
    assert v.status == "fail" and v.evidence["merged_twice"] == 1 and "second time" in v.summary


def test_safety_allows_a_new_rounds_upload_from_the_same_base() -> None:
    """On the clock a learner that never received round 0's result uploads for round 1 from the same base."""
    v = _safety(
        [
            upload(1.0, "learner-0"),
            _merge_of(1.1, 1, base=0, rnd=0),
            upload(2.0, "learner-0"),
            _merge_of(2.1, 2, base=0, rnd=1),
        ]
    )
    assert v.status == "pass", v.summary


def test_safety_allows_remerging_an_update_a_restore_lost() -> None:
    """Merge 2 happened after the checkpoint at 1 and died with the syncer: merging it again is not a repeat."""
    v = _safety(
        [
            upload(1.0, "learner-0"),
            _merge_of(1.1, 1, base=0),
            upload(2.0, "learner-0"),
            _merge_of(2.1, 2, base=1),
            syncer_start(3.0, restored=1),
            upload(4.0, "learner-0"),
            _merge_of(4.1, 2, base=1),
        ]
    )
    assert v.status == "pass", v.summary


def test_safety_refuses_remerging_an_update_the_checkpoint_holds() -> None:
    v = _safety(
        [
            upload(1.0, "learner-0"),
            _merge_of(1.1, 1, base=0),
            syncer_start(3.0, restored=1),
            upload(4.0, "learner-0"),
            _merge_of(4.1, 2, base=0),
        ]
    )
    assert v.status == "fail" and v.evidence["merged_twice"] == 1


def test_safety_needs_an_upload_after_a_syncer_restart() -> None:
    v = _safety([upload(1.0, "learner-0"), syncer_start(3.0, restored=0), _merge_of(4.1, 1, base=0)])
    assert v.status == "fail" and v.evidence["unbacked_participants"] == 1


def _judged(h: History, baseline_goodput: tuple[float, ...]) -> Verdict:
    return check_goodput(
        CheckInput(h, FACTS, Checks(), baseline_final_loss=2.5, baseline_goodput=baseline_goodput)
    )


def test_goodput_is_bounded_by_the_fault_free_runs_outside_faults() -> None:
    """No fault touched learner-0's training: it must merge about what the fault-free runs did (80% × (1 − 0.3)),
    not just the 10% floor. Negative control: the same 40% passes against the floor alone."""
    h = _goodput_history(400, num_merges=1)
    assert _judged(h, ()).status == "pass"
    v = _judged(h, (0.8, 0.85))
    assert v.status == "fail" and v.evidence["derived_min"] == pytest.approx(0.8 * 0.7), v
    assert "fault-free runs' lowest 80.0%" in v.summary and v.evidence["exposed_share"] == 0
    assert _judged(_goodput_history(400, num_merges=2), (0.8, 0.85)).status == "pass"


def test_goodput_bound_forgives_what_a_fault_exposed() -> None:
    """A partition over the second half of learner-0's training (it never uploads again) exposes that half: the
    bound falls to 80% × (1 − ½) × 0.7 = 28%, and 40% passes."""
    h = _goodput_history(400, num_merges=1)
    h = History(
        records=sorted([*h.records, *fault("f1", "partition", ["learner-0"], 3.0, 6.0)], key=lambda r: r.ts),
        events=h.events,
    )
    v = _judged(h, (0.8,))
    assert v.evidence["exposed_share"] == pytest.approx(0.5, abs=0.01), v.evidence
    assert v.status == "pass" and v.evidence["derived_min"] == pytest.approx(0.28, abs=0.01), v
