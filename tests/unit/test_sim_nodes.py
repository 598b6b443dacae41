"""Deterministic mode: each fault has the effect the real injector has, on a virtual clock."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.scenario import parse_scenario
from chaos.sim import SimOptions, simulate
from chaos.sim.clock import EventLoop
from trainer import events as ev

pytestmark = pytest.mark.chaos_simulation


def scenario(*faults: dict[str, Any], budget: int = 1_200_000, **extra: Any):
    return parse_scenario(
        {
            "name": "t",
            "cluster": {"token_budget": budget, "syncer": {"checkpoint_every_merges": 10}},
            "schedule": list(faults),
            **extra,
        }
    )


def of(r, kind: type, source: str | None = None) -> list[Any]:
    return [e for e in r.history.of(kind) if source is None or e.source == source]


def window(r, fault_id: str = "f0") -> tuple[float, float]:
    w = next(w for w in r.history.fault_windows() if w.fault_id == fault_id)
    return w.start, w.end


def test_loop_runs_ties_in_scheduling_order_and_stops_at_until() -> None:
    loop, seen = EventLoop(), list[str]()
    for x in "abc":
        loop.at(1.0, seen.append, x)
    loop.at(5.0, seen.append, "late")
    loop.run(until=2.0)
    assert seen == ["a", "b", "c"] and loop.now == 2.0


def test_kill_ends_the_incarnation_and_the_restart_joins_as_a_new_one() -> None:
    r = simulate(scenario({"fault": "kill", "targets": ["learner-1"], "at": 1, "duration": 2}))
    starts = of(r, ev.LearnerStart, "learner-1")
    assert [s.learner_incarnation for s in starts] == ["learner-1.0", "learner-1.1"]
    t0, t1 = window(r)
    uploads = [u.ts for u in of(r, ev.Upload) if u.learner_id == "learner-1"]
    assert not [t for t in uploads if t0 < t < t1]
    assert starts[1].ts >= t1 + SimOptions().restart_delay_s - 1e-6


def test_partition_to_syncer_stops_uploads_and_its_heal_resets_the_hung_call() -> None:
    r = simulate(
        scenario(
            {"fault": "partition", "targets": ["learner-0"], "direction": "to_syncer", "at": 1, "duration": 3}
        )
    )
    t0, t1 = window(r)
    assert not [u for u in of(r, ev.Upload) if u.learner_id == "learner-0" and t0 + 0.01 < u.ts < t1]
    failed = [x for x in of(r, ev.SyncResult, "learner-0") if x.reason == "unreachable"]
    assert failed and min(abs(x.ts - t1) for x in failed) < 0.01  # the call hung until the heal closed it


def test_link_down_refuses_at_once() -> None:
    r = simulate(scenario({"fault": "link_down", "targets": ["learner-0"], "at": 1, "duration": 3}))
    t0, _ = window(r)
    failed = [x.ts for x in of(r, ev.SyncResult, "learner-0") if x.reason == "unreachable"]
    assert failed and failed[0] - t0 < 0.5


def test_pause_freezes_steps_and_resumes() -> None:
    r = simulate(scenario({"fault": "pause", "targets": ["learner-2"], "at": 1, "duration": 3}))
    t0, t1 = window(r)
    assert not [e for e in r.history.events if e.source == "learner-2" and t0 + 0.05 < e.ts < t1]
    assert [e for e in r.history.events if e.source == "learner-2" and e.ts > t1]


def test_syncer_crash_restores_from_the_checkpoint_with_the_version_skip() -> None:
    r = simulate(scenario({"fault": "syncer_crash", "at": 2, "duration": 1}))
    restore = of(r, ev.Restore)
    assert len(restore) == 1 and restore[0].version_skip == 10
    assert [v.status for v in r.verdicts if v.name in ("durability", "reintegration")] == ["pass", "pass"]


def test_bandwidth_throttle_slows_uploads() -> None:
    """112 KB fragments at 100 KB/s take over a second. (By then the others have merged that fragment more
    than max_staleness times, so every throttled upload is refused as stale: the real rule, simulated.)"""
    r = simulate(
        scenario({"fault": "bandwidth", "targets": ["learner-0"], "rate_kbps": 100, "at": 1, "duration": 4})
    )
    t0, t1 = window(r)
    syncs = of(r, ev.SyncResult, "learner-0")
    during = [x.seconds for x in syncs if t0 + 0.1 < x.ts < t1]
    before = [x.seconds for x in syncs if x.ts < t0]
    assert during and min(during) > 1.0 and max(before) < 0.01


def test_honest_surrogate_uploads_are_not_refused() -> None:
    """Fault-free, every upload merges: the AdamW step bound does not apply to the surrogate's SGD steps (it refused
    most of them: 7 merges in a run that makes 91)."""
    r = simulate(scenario(budget=600_000), SimOptions(baseline=False))
    assert {e.reason for e in of(r, ev.Reject)} <= {"finished"}
    assert len(of(r, ev.Merge)) > 50


def test_corrupt_learner_is_refused_and_parameters_stay_finite() -> None:
    for mode in ("nan", "garbage"):
        r = simulate(
            scenario({"fault": "corrupt", "targets": ["learner-1"], "mode": mode, "at": 1, "duration": 8})
        )
        reasons = {e.reason for e in of(r, ev.Reject)}
        assert reasons & {"non_finite", "outlier_norm"}, (mode, reasons)
        assert [v.status for v in r.verdicts if v.name == "safety"] == ["pass"]


def test_a_majority_sending_garbage_from_the_first_round_is_refused() -> None:
    """Before any merge there is no merged-norm history to compare against, and a majority of corrupt learners
    owns the median anyway: only the per-step bound the syncer derives from the config stands between their
    garbage and the model (found by the nightly search: eval loss inf from 60 merges on)."""
    r = simulate(
        scenario(
            {
                "fault": "corrupt",
                "targets": ["learner-0", "learner-1"],
                "mode": "garbage",
                "at": 0,
                "duration": 2.64,
            }
        )
    )
    refused = [e for e in of(r, ev.Reject) if e.reason == "outlier_norm"]
    assert refused and {e.learner_id for e in refused} == {"learner-0", "learner-1"}
    assert [v.status for v in r.verdicts if v.name in ("safety", "parity")] == ["pass", "pass"]


def test_without_the_norm_guard_finite_garbage_reaches_the_model() -> None:
    """Negative control for the guard above: safety can fail."""
    r = simulate(
        parse_scenario(
            {
                "name": "t",
                "cluster": {"token_budget": 1_200_000, "syncer": {"max_norm_ratio": 0}},
                "schedule": [
                    {"fault": "corrupt", "targets": ["learner-1"], "mode": "garbage", "at": 1, "duration": 8}
                ],
            }
        )
    )
    assert r.failed("safety")


def test_auto_overlap_gathers_rounds_over_slow_links() -> None:
    """Every link throttled for the whole run (a fragment round trip of many steps): with τ = 2 the grace window
    is shut and rounds merge at their first upload's arrival, taking only uploads whose headers came by then;
    ``overlap_steps: auto`` sizes τ to the round and gathers the others (the same core decides in the gRPC
    syncer)."""
    slow = {"fault": "bandwidth", "targets": "all", "rate_kbps": 200, "at": 0, "duration": 10_000}

    def per_merge(overlap: int | str) -> float:
        s = parse_scenario(
            {
                "name": "t",
                "cluster": {
                    "token_budget": 600_000,
                    "algorithm": {"overlap_steps": overlap},
                    "syncer": {"checkpoint_every_merges": 10},
                },
                "schedule": [slow],
            }
        )
        merges = of(simulate(s, SimOptions(baseline=False)), ev.Merge)
        assert len(merges) >= 5, len(merges)
        return sum(len(m.participants) for m in merges) / len(merges)

    fixed, auto = per_merge(2), per_merge("auto")
    # Measured: 2.0 and 3.0 of 3 (1.18 and 3.0 when a round counted bodies, not headers).
    assert auto > fixed + 0.5, (fixed, auto)


def _back_after_a_partition_while_the_cluster_slowed() -> float:
    """Seconds from the heal to learner-3's first merge. Cut off, learner-3 extrapolates the syncer's clock at the
    pace it last heard (0.01 s a step: the lower median of 0.005, 0.01, 0.05, 0.05). The syncer restarts meanwhile
    and hears only the other three (0.01, 0.05, 0.05 and an empty slot: 0.05 s), so over the rest of the cut
    learner-3's copy of the clock runs ~1,000 cluster steps ahead (a compose run lost 40 s to this:
    docs/decisions.md)."""
    s = parse_scenario(
        {
            "name": "t",
            "cluster": {
                "token_budget": 4_000_000,
                "algorithm": {"num_learners": 4},
                "syncer": {"checkpoint_every_merges": 10, "settle_s": 30},
            },
            "schedule": [
                {"fault": "partition", "targets": ["learner-3"], "at": 3, "duration": 20},
                {"fault": "kill", "targets": ["syncer"], "at": 5, "duration": 1},
            ],
        }
    )
    opts = SimOptions(
        baseline=False, step_times={"learner-0": 0.01, "learner-1": 0.05, "learner-2": 0.05, "learner-3": 0.005}
    )
    r = simulate(s, opts)
    heal = window(r)[1]
    back = [
        m.ts for m in of(r, ev.Merge) if m.ts > heal and any(p.learner_id == "learner-3" for p in m.participants)
    ]
    assert back, "learner-3 never merged again"
    return back[0] - heal


def test_a_learner_whose_clock_ran_ahead_rejoins_the_cluster_schedule_at_once() -> None:
    assert (
        _back_after_a_partition_while_the_cluster_slowed() < 2.0
    )  # measured: 0.86 s (two rounds of its fragment: 8 steps × 0.05 s)


def test_without_the_rewind_it_waits_for_the_cluster_to_reach_its_own_rounds(monkeypatch) -> None:
    """Negative control for the test above."""
    monkeypatch.setattr("trainer.core.learner_book.REWIND_AFTER_ROUNDS", 10**9)
    assert _back_after_a_partition_while_the_cluster_slowed() > 5.0  # measured: 12.1 s


def _call_on_a_loop():
    """A learner's call (chaos.sim.runner._Call) on a bare event loop: its deadline 10 s, the syncer serving."""
    from types import SimpleNamespace

    from chaos.sim.runner import _Call

    loop, seen = EventLoop(), list[str]()
    node = SimpleNamespace(lid="l0", incarnation="l0.0", deliver=lambda inc, fn, *a: fn(*a))
    sim = SimpleNamespace(
        loop=loop,
        cfg=SimpleNamespace(learner=SimpleNamespace(rpc_timeout_s=10.0)),
        inflight={"l0": {}},
        syncer=SimpleNamespace(serving=True, up=True),
        opts=SimpleNamespace(latency_s=0.01, bandwidth_Bps=float("inf")),
        links={"l0": SimpleNamespace(blocked=lambda direction: None, send=lambda *a: (0.1, 0.1))},
        rng=None,
    )
    call = _Call(sim, node, lambda reply: seen.append("reply"), lambda: seen.append("failed"), 10.0)  # type: ignore[arg-type]
    return loop, call, seen


@pytest.mark.parametrize("ends", ["deadline", "reset"])
def test_a_call_that_fails_after_its_header_reached_the_syncer_tells_the_syncer(ends: str) -> None:
    # As the service's read of a cancelled stream ends: the syncer stops waiting for the body and stops counting
    # its bytes as a sign of life (trainer.core.syncer_state.withdraw); without it the announcement stayed.
    loop, call, seen = _call_on_a_loop()
    loop.at(1.0, call.header, lambda: seen.append("header"), lambda: seen.append("lost"))
    if ends == "reset":
        loop.at(2.0, call.fail_fast)
    loop.run(until=20.0)
    assert seen == ["header", "lost", "failed"]


def test_an_answered_call_or_one_failed_before_its_header_arrived_tells_the_syncer_nothing() -> None:
    loop, call, seen = _call_on_a_loop()
    loop.at(1.0, call.header, lambda: seen.append("header"), lambda: seen.append("lost"))
    loop.at(2.0, call.respond, "ok", 10)
    loop.run(until=20.0)
    assert seen == ["header", "reply"]
    loop, call, seen = _call_on_a_loop()
    loop.at(11.0, call.header, lambda: seen.append("header"), lambda: seen.append("lost"))  # after the deadline
    loop.run(until=20.0)
    assert seen == ["failed"]


def _small_over_500_kbps(cluster: dict[str, Any]) -> Any:
    """A simulated run of the small preset (~1.1 s steps) with every learner's link at 500 KB/s from the start."""
    return simulate(
        parse_scenario(
            {
                "name": "t",
                "cluster": {"model": {"size": "small"}, "learner": {"step_delay_s": 1.1}, **cluster},
                "schedule": [
                    {"fault": "bandwidth", "targets": "all", "rate_kbps": 500, "at": 0, "duration": 10**5}
                ],
            }
        )
    )


def test_over_a_slow_link_reports_wait_behind_uploads_and_the_pieces_keep_every_learner_in_its_rounds() -> None:
    # The small preset's 3.4 MB fragments over 500 KB/s take ~7 s, past the 5 s liveness timeout, and a learner's
    # reports wait behind its upload on the one link (chaos.sim.network.Link.send). Heard only through the pieces
    # of its body, each learner stays in its rounds: without them (the real syncer before it counted them), rounds
    # merged at the first upload and refused the others as late, 1.3 learners a merge of 3.
    r = _small_over_500_kbps({"token_budget": 6_000_000})
    merges = of(r, ev.Merge)
    uploads = of(r, ev.Upload)
    assert len(merges) >= 5 and min(u.seconds for u in uploads[3:]) > 5.0  # past the fast first round
    # Every round but the last, which the budget's end flushes with whatever is in.
    assert [len(m.participants) for m in merges[:-1]] == [3] * (len(merges) - 1)
    assert not [e for e in of(r, ev.Reject) if e.reason == "late_round"]


def test_synchronous_diloco_over_a_slow_link_fetches_its_fragments_while_they_cross() -> None:
    # Synchronous DiLoCo syncs every fragment at once: four 3.4 MB fragments come down a 500 KB/s link one behind
    # another (~27 s). With a fetch's deadline fixed at the long poll plus one RPC timeout (12 s; the real client's
    # before trainer.core.deadlines) the later ones missed it, every retry started over, and training stopped; with
    # a timeout per piece every learner takes every merge and the run ends at its budget.
    r = _small_over_500_kbps({"token_budget": 400_000, "algorithm": {"mode": "sync-diloco", "num_learners": 3}})
    assert not r.timed_out and r.final_loss is not None
    merges = of(r, ev.Merge)
    # Every round but the last, which the budget's end flushes with whatever is in.
    assert len(merges) >= 8 and {len(m.participants) for m in merges[:-1]} == {3}, [
        len(m.participants) for m in merges
    ]
    assert [e.reason for e in of(r, ev.SyncResult) if not e.accepted] == []
    # Every learner applied every merge but the last round's (the budget ends the run as they come down).
    assert len(of(r, ev.Apply)) >= 3 * (len(merges) - 4)
