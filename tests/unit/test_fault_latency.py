"""benchmarks.costs.fault_latency's pure parts: reading observations, the schedule, the controller's records, summaries.

No processes, sockets or threads: the chaos run itself is the benchmark (``python -m benchmarks.costs.fault_latency``).
"""

from __future__ import annotations

import doctest
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

import benchmarks.costs.fault_latency as fl
import benchmarks.costs.fault_latency_observers as fl_observers
import benchmarks.costs.fault_latency_plan as fl_plan
import benchmarks.costs.fault_latency_reading as fl_reading
from benchmarks.costs.fault_latency import scenario_tree
from benchmarks.costs.fault_latency_plan import KINDS, NETWORK_KINDS, build_schedule
from benchmarks.costs.fault_latency_reading import (
    FaultTimes,
    NetRule,
    Obs,
    ProbeSample,
    ProcState,
    StatusSample,
    classify_probe,
    fault_times,
    last_ok,
    net_rule,
    onset,
    period_ms,
    probe_baseline,
    proc_class,
    proc_intervals,
    recovery,
    scheduling_lags,
    state_at,
    summarize,
)
from chaos.history import ControllerRecord, FaultOp, Phase, PlannedFault, PlanRecord, Recorder


@pytest.mark.parametrize("module", [fl, fl_plan, fl_reading, fl_observers])
def test_doctests(module) -> None:
    assert doctest.testmod(module).failed == 0


# ---- onset / recovery --------------------------------------------------------------------------------------


def calls(*spec: tuple[float, float, bool, bool]) -> list[Obs]:
    return [Obs(*s) for s in spec]


def test_onset_ignores_effects_before_the_invoke_and_after_the_heal() -> None:
    o = calls((0.0, 0.1, True, False), (0.1, 0.2, False, True), (0.2, 0.3, True, False), (5.0, 5.1, True, False))
    assert onset(o, 0.15, 1.0) == 0.2
    assert onset(o[:2], 0.15, 1.0) is None
    assert onset([o[3]], 0.15, 1.0) is None  # after the window


def test_onset_counts_a_call_in_flight_at_the_invoke_from_the_invoke() -> None:
    assert onset(calls((0.9, 1.4, True, False)), 1.0, 2.0) == 1.0


def test_onset_confirm_needs_consecutive_affected_calls() -> None:
    o = calls((1.0, 1.1, True, False), (1.1, 1.2, False, True), (1.2, 1.3, True, False), (1.3, 1.4, True, False))
    assert onset(o, 0.0, 9.0, confirm=1) == 1.0
    assert onset(o, 0.0, 9.0, confirm=2) == 1.2  # a lone slow call is noise, not the effect


def test_onset_sorts_by_start() -> None:
    o = calls((2.0, 2.1, True, False), (1.0, 1.1, True, False))
    assert onset(o, 0.0, 9.0) == 1.0


def test_recovery_waits_for_the_last_relapse_within_stable() -> None:
    # data_limit: a fresh connection carries a call, then is closed again; only the lasting run counts.
    o = calls(
        (1.0, 1.01, False, False),
        (1.01, 1.02, False, True),
        (1.02, 1.03, True, False),
        (1.03, 1.04, False, True),
        (1.04, 1.5, False, True),
    )
    assert recovery(o, 1.0, 9.0, stable_s=0.0) == 1.01
    assert recovery(o, 1.0, 9.0, stable_s=0.25) == 1.03


def test_recovery_needs_observations_covering_stable() -> None:
    o = calls((1.0, 1.05, False, True))
    assert recovery(o, 1.0, 9.0, stable_s=0.1) is None  # not watched long enough to say
    assert recovery(o, 1.0, 9.0, stable_s=0.05) == 1.0


def test_recovery_is_clamped_to_the_heal_and_bounded_by_the_slot() -> None:
    o = calls((0.5, 2.0, False, True))
    assert recovery(o, 1.0, 9.0) == 1.0
    assert recovery(calls((3.0, 3.1, False, True)), 1.0, 2.0) is None


def test_recovery_never_when_always_unhealthy() -> None:
    assert recovery(calls((1.0, 1.5, True, False), (1.5, 2.0, True, False)), 1.0, 9.0) is None


# ---- /proc ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stat, cls",
    [
        ("1234 (python) R 1 1234", "running"),
        ("1234 (python) S 1 1234", "running"),
        ("1234 (python) D 1 1234", "running"),
        ("1234 (python) T 1 1234", "stopped"),
        ("1234 (python) t 1 1234", "stopped"),
        ("1234 (python) Z 1 1234", "dead"),
        ("1234 (a) b) c) X 1", "dead"),  # the name may hold ") "
        (None, "dead"),
    ],
)
def test_proc_class(stat: str | None, cls: str) -> None:
    assert proc_class(stat) == cls


def test_proc_intervals_and_state_at_follow_pid_changes() -> None:
    ch = [ProcState(0.0, 10, "running"), ProcState(1.0, 10, "dead"), ProcState(2.0, 11, "running")]
    assert state_at(ch, 0.5) == ch[0] and state_at(ch, 1.5) == ch[1] and state_at(ch, -1.0) is None
    gone = proc_intervals(ch, 3.0, lambda c: c.pid != 10 or c.cls == "dead", lambda c: c.pid != 10)
    assert [(o.start, o.end) for o in gone] == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert onset(gone, 0.7, 5.0) == 1.0  # the kill: pid 10 seen dead
    assert recovery(gone, 1.5, 5.0) == 2.0  # the restart: pid 11 running


def test_slow_recovery_waits_for_the_duty_cycle_to_stop() -> None:
    # stopped / running every 50 ms until 1.2 s, then running for good
    ch = [ProcState(round(0.05 * i, 2), 7, "stopped" if i % 2 else "running") for i in range(25)]
    o = proc_intervals(ch, 3.0, lambda c: c.cls == "stopped", lambda c: c.cls == "running")
    assert recovery(o, 0.5, 3.0, stable_s=0.3) == 1.2
    assert onset(o, 0.01, 3.0) == 0.05


# ---- probe -----------------------------------------------------------------------------------------------------


def test_net_rules() -> None:
    assert net_rule("partition", {"direction": "both"}, 100) == NetRule("deadline", confirm=2)
    assert {net_rule(k, {}, 100).mode for k in ("link_down", "reset_peer", "data_limit")} == {"error"}
    assert net_rule("latency", {"latency_ms": 40}, 100) == NetRule("slow", 40.0, 2)
    assert net_rule("bandwidth", {"rate_kbps": 2}, 200).extra_ms == 50.0  # 200 B at 2 B/ms, halved
    with pytest.raises(ValueError):
        net_rule("kill", {}, 100)


def test_every_network_kind_has_a_rule() -> None:
    for kind in NETWORK_KINDS:
        rule = net_rule(kind, KINDS[kind].params, 200.0)
        # the hold fits the calls that confirm the effect (timeouts, or slowed round trips of ~2 × the threshold)
        per_call = KINDS[kind].deadline_s if rule.mode == "deadline" else 2 * rule.extra_ms / 1000
        assert KINDS[kind].hold_s >= (rule.confirm + 1) * per_call


def test_classify_probe() -> None:
    ok, slow = ProbeSample(0.0, 0.002, "OK", 190), ProbeSample(0.0, 0.150, "OK", 190)
    dl, un = ProbeSample(0.0, 0.5, "DEADLINE_EXCEEDED"), ProbeSample(0.0, 0.001, "UNAVAILABLE")
    part, err, lat = NetRule("deadline", confirm=2), NetRule("error"), NetRule("slow", 100.0, 2)
    assert (classify_probe(dl, part, 2).affected, classify_probe(un, part, 2).affected) == (True, False)
    assert classify_probe(ok, part, 2).healthy and not classify_probe(un, part, 2).healthy
    # a deadline is load, not a refusal: only errors count for link_down / reset_peer / data_limit
    assert (classify_probe(un, err, 2).affected, classify_probe(dl, err, 2).affected) == (True, False)
    assert classify_probe(slow, lat, 2.0).affected and not classify_probe(slow, lat, 2.0).healthy
    assert classify_probe(ok, lat, 2.0).healthy and not classify_probe(ok, lat, 2.0).affected
    assert not classify_probe(un, lat, 2.0).affected and not classify_probe(un, lat, 2.0).healthy


def test_probe_baseline_uses_successful_calls_before_the_inject() -> None:
    s = [
        ProbeSample(0.0, 0.002, "OK", 180),
        ProbeSample(0.01, 0.5, "DEADLINE_EXCEEDED"),
        ProbeSample(0.6, 0.604, "OK", 200),
        ProbeSample(1.0, 1.3, "OK", 200),
    ]
    assert probe_baseline(s, 0.9) == pytest.approx((3.0, 190.0))
    assert probe_baseline(s, 0.001) is None


def test_partition_sequence_end_to_end() -> None:
    """Probe calls around a partition: fine, cut (two deadlines), heal closes the link, reconnect, fine."""
    seq = [ProbeSample(round(0.002 * i, 3), round(0.002 * i + 0.001, 4), "OK", 190) for i in range(50)]  # to 0.1
    seq += [
        ProbeSample(0.1, 0.2, "DEADLINE_EXCEEDED"),
        ProbeSample(0.2, 0.3, "DEADLINE_EXCEEDED"),
        ProbeSample(0.3, 0.35, "UNAVAILABLE"),  # heal at 0.35: Toxiproxy closes the link it was cutting
        ProbeSample(0.351, 0.353, "UNAVAILABLE"),
    ]  # the fresh channel is not connected yet
    seq += [ProbeSample(round(0.36 + 0.002 * i, 3), round(0.361 + 0.002 * i, 4), "OK", 190) for i in range(100)]
    rule = net_rule("partition", {}, 190)
    o = [classify_probe(p, rule, 1.0) for p in seq]
    assert onset(o, 0.099, 0.35, rule.confirm) == 0.1
    assert onset(o, 0.21, 0.35, rule.confirm) is None  # one deadline left in the window: not confirmed
    assert recovery(o, 0.35, 2.0, 0.1) == 0.36


# ---- status -------------------------------------------------------------------------------------------------


def test_last_ok_and_rejoin() -> None:
    st = [
        StatusSample(0.0, 0.01, True, "s1", {"learner-0": "a"}),
        StatusSample(1.0, 1.01, False),
        StatusSample(2.0, 2.01, True, "s1", {"learner-0": "a"}),
        StatusSample(3.0, 3.01, True, "s1", {"learner-0": "b"}),
    ]
    assert last_ok(st, 1.5) is st[0] and last_ok(st, 0.0) is None
    assert fl._rejoin(st, "learner-0", st[0], 1.0, 9.0) == 3.0
    assert fl._rejoin(st, "learner-0", None, 1.0, 9.0) == 2.0  # no record before: any incarnation listed


# ---- schedule and scenario --------------------------------------------------------------------------------


def test_schedule_is_seeded_back_to_back_and_complete() -> None:
    kinds = list(KINDS)
    a = build_schedule(kinds, 3, random.Random(5))
    assert a == build_schedule(kinds, 3, random.Random(5))
    assert a != build_schedule(kinds, 3, random.Random(6))
    assert sorted(s.kind for s in a) == sorted(kinds * 3)
    b = build_schedule(kinds, 3, random.Random(5), repeats_of={"corrupt": 1, "kill": 0})
    assert [s.kind for s in b].count("corrupt") == 1 and "kill" not in {s.kind for s in b}
    assert a[0].start_s == fl_plan.FIRST_SLOT_S
    for prev, nxt in zip(a, a[1:]):
        assert nxt.start_s == prev.end_s
    for s in a:
        spec = KINDS[s.kind]
        assert s.start_s + fl_plan.LEAD_S <= s.at <= s.start_s + fl_plan.LEAD_S + fl_plan.JITTER_S
        assert s.at + s.duration < s.end_s  # the heal falls inside the slot
        assert s.target == ("syncer" if not spec.learner_target else s.target) and s.target in (
            *fl_plan.LEARNERS,
            "syncer",
        )


def test_scenario_tree_is_a_valid_scenario() -> None:
    from chaos.fault_plan import plan
    from chaos.scenario import parse_scenario

    slots = build_schedule(list(KINDS), 1, random.Random(0))
    sc = parse_scenario(scenario_tree(slots, 0))
    planned = plan(sc)
    assert [p.fault_id for p in planned] == [s.fault_id for s in slots]
    assert [(p.at, p.duration, p.targets) for p in planned] == [(s.at, s.duration, (s.target,)) for s in slots]
    assert sc.timeout_s > slots[-1].end_s
    assert sc.cluster.algorithm.num_learners == len(fl_plan.LEARNERS)
    for p in planned:  # the controller builds the project's own fault classes from them
        assert p.build().kind == p.kind


# ---- the controller's records ----------------------------------------------------------------------------------


def test_fault_times_and_lags() -> None:
    op = dict(fault_id="a", fault_kind="kill", targets=["learner-0"])
    recs: list[ControllerRecord] = [
        PlanRecord(
            ts=89.0,
            scenario="s",
            seed=0,
            faults=[
                PlannedFault(
                    fault_id="a",
                    kind="kill",
                    targets=["learner-0"],
                    at=2.0,
                    at_merge=None,
                    duration=1.0,
                    params={},
                )
            ],
        ),
        Phase(ts=90.0, name="bring_up"),
        Phase(ts=100.0, name="steady"),
        FaultOp(ts=102.05, action="inject", outcome="invoke", **op),
        FaultOp(ts=102.15, action="inject", outcome="ok", **op),
        FaultOp(ts=103.10, action="heal", outcome="invoke", **op),
        FaultOp(ts=103.20, action="heal", outcome="fail", **op),
        FaultOp(ts=104.0, action="heal", outcome="fail", **{**op, "fault_id": "zzz"}),  # not planned
    ]
    steady, ft = fault_times(recs)
    assert steady == 100.0 and set(ft) == {"a"}
    a = ft["a"]
    assert (a.inject_ok, a.heal_ok, a.inject_done, a.heal_done) == (True, False, 102.15, 103.2)
    inj, heal = scheduling_lags(steady, a)
    assert inj == pytest.approx(0.05) and heal == pytest.approx(0.05)
    assert scheduling_lags(steady, FaultTimes("b", "kill", 1.0, 1.0)) == (None, None)


def test_observer_reads_the_controllers_records_as_they_are_written(tmp_path: Path) -> None:
    """The steady time and heal invokes come from controller.jsonl while the run writes it; a half-written line
    waits for the next read."""
    op = dict(fault_id="a", fault_kind="pause", targets=["learner-0"], action="heal")
    rec = Recorder(tmp_path / "controller.jsonl")
    rec.add(Phase(ts=100.0, name="steady"))
    rec.add(FaultOp(ts=101.0, outcome="invoke", **op))
    obs = fl.Observer([])
    obs.backend = SimpleNamespace(run_dir=tmp_path)
    with open(tmp_path / "controller.jsonl", "a") as f:
        f.write(FaultOp(ts=102.0, outcome="invoke", **{**op, "fault_id": "b"}).model_dump_json()[:20])
    obs._read_records()
    assert obs.steady == 100.0 and obs.heal_invoked == {"a": 101.0}
    rec.close()
    with open(tmp_path / "controller.jsonl", "a") as f:
        f.write(FaultOp(ts=102.0, outcome="invoke", **{**op, "fault_id": "b"}).model_dump_json()[20:] + "\n")
    obs._read_records()
    assert obs.heal_invoked == {"a": 101.0, "b": 102.0}


def test_measure_a_pause_from_fake_observations() -> None:
    slot = fl_plan.Slot(0, "s00-pause", "pause", "learner-0", 1.0, 1.35, 0.5, 2.5)
    ft = FaultTimes(
        "s00-pause",
        "pause",
        1.35,
        0.5,
        inject_invoke=101.36,
        inject_done=101.361,
        inject_ok=True,
        heal_invoke=101.87,
        heal_done=101.871,
        heal_ok=True,
    )
    obs = fl.Observer([slot])
    obs.changes = {
        "learner-0": [
            ProcState(100.0, 5, "running"),
            ProcState(101.362, 5, "stopped"),
            ProcState(101.873, 5, "running"),
        ]
    }
    obs.proc_last = 102.4
    s = fl.measure(slot, ft, 100.0, obs, 102.5)
    assert s.effect_ms == pytest.approx(2.0) and s.recovery_ms == pytest.approx(3.0)
    assert s.sched_lag_ms == pytest.approx(10.0) and s.inject_call_ms == pytest.approx(1.0)


def test_measure_a_network_fault_without_baseline_says_so() -> None:
    slot = fl_plan.Slot(0, "s00-link_down", "link_down", "learner-1", 1.0, 1.3, 0.5, 2.8)
    ft = FaultTimes("s00-link_down", "link_down", 1.3, 0.5, inject_invoke=101.3, inject_ok=True, heal_invoke=101.8)
    obs = fl.Observer([slot])
    obs.probes = {"s00-link_down": [ProbeSample(101.31, 101.32, "UNAVAILABLE")]}
    s = fl.measure(slot, ft, 100.0, obs, 102.8)
    assert s.effect_ms is None and "baseline" in s.note


# ---- summaries -----------------------------------------------------------------------------------------------


def test_summarize_and_periods() -> None:
    assert summarize([]) == fl_reading.Summary(0, None, None)
    assert summarize([None, 5.0]) == fl_reading.Summary(1, 5.0, 5.0)
    assert period_ms([0.0, 0.001, 0.003, 10.0]) == [1.0, 2.0]
    assert fl.percentile([5.0] * 99 + [100.0], 0.99) == 5.0
    assert fl.percentile(list(range(1, 101)), 0.99) == 99


def test_table_rows_report_missed_and_overlapped_repeats() -> None:
    samples = [
        fl.Sample("a", "pause", "learner-0", 1.0, sched_lag_ms=50.0, effect_ms=1.0, recovery_ms=2.0),
        fl.Sample("b", "pause", "learner-1", 3.0, sched_lag_ms=90.0, effect_ms=None, recovery_ms=4.0),
        fl.Sample(
            "c",
            "pause",
            "learner-1",
            5.0,
            sched_lag_ms=3000.0,
            effect_ms=900.0,
            recovery_ms=900.0,
            overlapped=True,
        ),
    ]
    res: dict[str, dict[str, float | None]] = {
        k: {"median_ms": 2.0, "p99_ms": 5.0, "max_ms": 9.0} for k in ("proc", "status", "probe")
    }
    rows, summary = fl.table_rows(samples, ["pause", "kill"], res)
    assert len(rows) == 1 and len(rows[0]) == len(fl.HEADER)
    assert rows[0][3:9] == [3, "1 e, 1 o", "1.0", "1.0", "3.0", "4.0"]
    assert summary["pause"]["sched_lag_ms"] == {"n": 3, "median": 90.0, "worst": 3000.0}
    assert summary["pause"]["overlapped"] == 1


def test_measure_all_ends_windows_at_the_next_inject_and_flags_overlap() -> None:
    slots = [
        fl_plan.Slot(0, "a", "pause", "learner-0", 1.0, 1.3, 0.5, 2.5),
        fl_plan.Slot(1, "b", "pause", "learner-0", 2.5, 2.8, 0.5, 4.0),
    ]
    times = {
        "a": FaultTimes(
            "a",
            "pause",
            1.3,
            0.5,
            inject_invoke=101.3,
            inject_done=101.3,
            inject_ok=True,
            heal_invoke=101.8,
            heal_done=101.8,
            heal_ok=True,
        ),
        # b injected before a's heal returned (a late controller): overlapped
        "b": FaultTimes(
            "b",
            "pause",
            2.8,
            0.5,
            inject_invoke=101.5,
            inject_done=101.5,
            inject_ok=True,
            heal_invoke=102.0,
            heal_done=102.0,
            heal_ok=True,
        ),
    }
    obs = fl.Observer(slots)
    obs.changes = {
        "learner-0": [
            ProcState(100.0, 5, "running"),
            ProcState(101.31, 5, "stopped"),
            ProcState(101.81, 5, "running"),
        ]
    }
    obs.proc_last = 103.0
    a, b = fl.measure_all(slots, times, 100.0, obs)
    assert a.overlapped and not b.overlapped
    assert a.recovery_ms is None  # a's recovery window ended at b's inject (101.5), before a's heal
    assert b.effect_ms == 0.0  # already stopped when b was invoked


def test_compare_lags_reads_each_arms_injects_and_heals() -> None:
    """The controller-loop comparison (``--compare-poll``): every time-planned inject and its heal, per arm."""

    def records(late_s: float) -> list[ControllerRecord]:
        op = dict(fault_id="a", fault_kind="pause", targets=["learner-0"])
        fault = PlannedFault(
            fault_id="a", kind="pause", targets=["learner-0"], at=1.0, at_merge=None, duration=0.5, params={}
        )
        return [
            PlanRecord(ts=99.0, scenario="s", seed=0, faults=[fault]),
            Phase(ts=100.0, name="steady"),
            FaultOp(ts=101.0 + late_s, outcome="invoke", action="inject", **op),
            FaultOp(ts=101.5 + 3 * late_s, outcome="invoke", action="heal", **op),
        ]

    lags, table = fl.compare_lags({"plan": records(0.001), "poll": records(0.05)})
    assert lags["plan"]["lags_ms"] == pytest.approx([1.0, 2.0]) and lags["poll"]["worst_ms"] == pytest.approx(
        100.0
    )
    assert table.count("\n") == 3 and "fixed 0.1 s poll" in table
