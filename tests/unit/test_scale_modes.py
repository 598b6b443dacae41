"""Unit tests for the scale simulator's modes (data-parallel, sync DiLoCo, decoupled) via simulate_scale."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.scale import build_scale_config, simulate_scale, sync_diloco
from chaos.scale.outages import unit_outages
from chaos.scale.quantities import DAY, YEAR
from trainer.core.reasons import RejectReason
from trainer.core.replies import upload_outcome

# Explicit recovery times and algorithm shapes, so these tests do not move with the package's calibrated defaults.
RECOVERY = {"detect_s": 10.0, "restart_s": 61.0, "reconfigure_s": 11.0, "rejoin_s": 0.0}


def plan(
    mode="data-parallel", *, learners=4, fragments=4, sync_every=8, quorum=None, recovery=None, overlap=2, **top
):
    """A plan tree with every algorithm and recovery knob these tests depend on written out (decoupled: τ = 2, the
    paper's, unless ``overlap`` says otherwise; the trainer's default is ``auto``)."""
    if mode == "data-parallel":
        alg = {"mode": mode}
    else:
        alg = {"mode": mode, "num_learners": learners, "num_fragments": fragments, "sync_every": sync_every}
        if quorum is not None:
            alg["min_quorum"] = quorum
        if mode == "decoupled":
            alg["overlap_steps"] = overlap
    tree = {
        "duration": 3600,
        "cluster": {"chips": 1000},
        "workload": {"step_s": 1, "tokens_per_step": 1000},
        "failures": {"mtbi_per_chip": 0},
        "recovery": {**RECOVERY, **(recovery or {})},
        "algorithm": alg,
    }
    for key, value in top.items():
        tree[key] = (
            {**tree[key], **value} if isinstance(value, dict) and isinstance(tree.get(key), dict) else value
        )
    return build_scale_config(tree)


def one_failure(at, learner=0, down_s=None):
    f = {"at": at, "learner": learner}
    if down_s is not None:
        f["down_s"] = down_s
    return {"mtbi_per_chip": 0, "schedule": [f]}


def check_invariants(r):
    assert 0.0 <= r.goodput <= 1.0 + 1e-12, r.goodput
    assert 0.0 <= r.merged_goodput <= 1.0 + 1e-12, r.merged_goodput
    assert 0.0 <= r.compute_goodput <= 1.0 + 1e-12, r.compute_goodput
    assert 0.0 <= r.merged_tokens <= r.trained_tokens * (1 + 1e-12), (r.merged_tokens, r.trained_tokens)
    assert 0.0 <= r.longest_stall_s <= r.wall_s + 1e-9


# ---- no failures -------------------------------------------------------------------------------
def test_data_parallel_without_failures_has_goodput_one():
    """No failures, no exposed communication: every step counts, goodput exactly 1."""
    r = simulate_scale(plan())
    assert r.goodput == 1.0 and r.merged_goodput == 1.0 and r.compute_goodput == 1.0
    assert r.failures == 0
    assert r.updates == 3600
    assert r.longest_stall_s == 1.0
    assert r.merged_tokens == 3600 * 1000


def test_data_parallel_goodput_is_one_up_to_step_granularity():
    """With a step that does not divide the run, only the unfinished last step is missing."""
    r = simulate_scale(plan(workload={"step_s": 0.7}))
    n = math.floor(3600 / 0.7)
    assert r.updates == n
    assert r.goodput == pytest.approx(n * 0.7 / 3600)
    assert r.goodput > 1 - 0.7 / 3600 - 1e-12


def test_sync_diloco_without_failures_merges_every_h_steps():
    """Sync DiLoCo merges once every H steps; nothing is lost, so goodput is 1."""
    r = simulate_scale(plan("sync-diloco", sync_every=10, fragments=1))
    assert r.updates == 360
    assert r.longest_stall_s == 10.0
    assert r.goodput == 1.0 and r.compute_goodput == 1.0
    assert r.details["rounds"] == 360


def test_sync_diloco_update_times_are_spaced_by_h_steps():
    """The merge times of a fault-free sync DiLoCo run are exactly H * step_s apart."""
    cfg = plan("sync-diloco", sync_every=6, fragments=3, workload={"step_s": 0.5})
    t = sync_diloco.run(cfg, unit_outages(cfg, 3600.0))
    np.testing.assert_allclose(np.diff(np.concatenate([[0.0], t.update_times])), 3.0)


def test_sync_diloco_round_includes_the_blocking_transfer():
    """A limited link adds the model's round trip (up and down) plus round_overhead_s to every round."""
    # 1B params * 2 bytes = 16 Gbit; at 16 Gbps: 1 s up, 1 s down; plus 0.5 s overhead.
    r = simulate_scale(
        plan(
            "sync-diloco",
            sync_every=10,
            fragments=1,
            workload={"params": "1B"},
            network={"bandwidth": 16, "round_overhead_s": 0.5},
        )
    )
    assert r.details["round_comm_s"] == pytest.approx(2.5)
    assert r.longest_stall_s == pytest.approx(12.5)
    assert r.updates == math.floor(3600 / 12.5)
    assert r.goodput == pytest.approx(r.updates * 10 / 3600)


def test_decoupled_without_failures():
    """Decoupled DiLoCo never waits: goodput 1; about tau of every H steps are overwritten, so merged ~ 1 - tau/H."""
    r = simulate_scale(plan("decoupled", sync_every=8, fragments=4))
    assert r.goodput == 1.0
    assert r.merged_goodput == pytest.approx(1 - 2 / 8, abs=0.01)
    assert r.details["skipped_syncs"] == 0 and r.details["refused_stale"] == 0
    assert r.details["participants_per_merge"] == 4.0
    assert r.longest_stall_s <= 8 / 4 + 1e-9  # a fragment merges every H/P steps


# ---- data-parallel against the renewal formula ----------------------------------------------------
@pytest.mark.parametrize("elastic", [False, True])
def test_data_parallel_goodput_matches_the_renewal_formula(elastic):
    """150k chips for 7 days: goodput ~ 1 / (1 + lambda * D), D = the outage plus half a step lost (2 points)."""
    cfg = plan(
        elastic=elastic,
        duration="7d",
        cluster={"chips": "150k"},
        failures={"mtbi_per_chip": "1y"},
        workload={"step_s": 1.0, "tokens_per_step": "4M"},
    )
    r = simulate_scale(cfg)
    lam = 150_000 / YEAR
    down = RECOVERY["detect_s"] + (RECOVERY["reconfigure_s"] if elastic else RECOVERY["restart_s"])
    expected = 1 / (1 + lam * (down + 0.5))
    assert r.goodput == pytest.approx(expected, abs=0.02)
    expected_failures = lam * 7 * DAY
    assert abs(r.failures - expected_failures) <= 5 * math.sqrt(expected_failures)


def test_elastic_beats_non_elastic_for_the_same_failures():
    """Same seed, same failures: pausing to reconfigure beats restarting."""
    kw = dict(duration="1d", cluster={"chips": "50k"}, failures={"mtbi_per_chip": "1y"}, seed=3)
    el, ne = simulate_scale(plan(elastic=True, **kw)), simulate_scale(plan(elastic=False, **kw))
    assert el.failures == ne.failures > 0
    assert el.goodput > ne.goodput
    assert el.longest_stall_s < ne.longest_stall_s


def test_non_elastic_data_parallel_single_failure_costs_outage_and_step_in_flight():
    """A failure at 100.5 s with down_s 20 loses the half-done step and 20 s: no step ends in (100, 121.5)."""
    r = simulate_scale(plan(elastic=False, duration=1000, failures=one_failure(100.5, down_s=20)))
    assert r.failures == 1
    assert r.longest_stall_s == pytest.approx(21.5)
    assert r.longest_stall_at == pytest.approx(100.0)
    # steps end at 1..100, then 121.5, ..., 999.5
    assert r.updates == 100 + 879
    assert r.merged_tokens == (100 + 879) * 1000


def test_checkpoint_rollback_loses_progress_since_the_checkpoint():
    """Non-elastic with checkpoints every 50 s: a failure at 125.5 s rolls back the 25 steps since 100 s."""
    r = simulate_scale(
        plan(
            elastic=False,
            duration=1000,
            recovery={"checkpoint_every_s": 50},
            failures=one_failure(125.5, down_s=20),
        )
    )
    assert r.details["rolled_back_tokens"] == 25 * 1000
    no_ckpt = simulate_scale(plan(elastic=False, duration=1000, failures=one_failure(125.5, down_s=20)))
    assert r.merged_tokens == no_ckpt.merged_tokens - 25 * 1000
    assert r.goodput < no_ckpt.goodput


def test_elastic_replace_time_costs_the_failed_replicas_share():
    """Elastic with replace_s: the failed replica's chips sit out after the pause, lowering goodput by its share."""
    kw = dict(
        elastic=True,
        duration=3600,
        cluster={"chips": 1000, "chips_per_replica": 100},
        failures=one_failure(100, down_s=20),
    )
    base = simulate_scale(plan(**kw))
    slow = simulate_scale(plan(recovery={"replace_s": 600}, **kw))
    lost = base.merged_tokens - slow.merged_tokens
    assert lost == pytest.approx(0.1 * 1000 * (600 - 20))  # 10% of the job from the pause's end to 600 s
    assert slow.goodput < base.goodput


def test_elastic_replica_sit_out_is_bounded_by_the_run():
    """BUG CHECK: a replica failing near the end can only sit out until the run ends; goodput stays >= 0."""
    # 2 replicas of 5 chips; failure at 90 s of a 100 s run; replacement takes 1000 s. The 90 steps before the
    # failure are merged; the failed half of the job can at most idle for the remaining 10 s.
    r = simulate_scale(
        plan(
            elastic=True,
            duration=100,
            cluster={"chips": 10, "chips_per_replica": 5},
            recovery={"replace_s": 1000},
            failures=one_failure(90),
        )
    )
    assert r.merged_tokens >= 0
    assert r.goodput >= 0.85


# ---- data-parallel across sites ----------------------------------------------------------------------
def test_data_parallel_one_site_exposes_no_communication():
    """Inside one site the all-reduce is part of the step, whatever the bandwidth."""
    r = simulate_scale(plan(cluster={"sites": 1}, workload={"params": "1B"}, network={"bandwidth": 0.1}))
    assert r.details["exposed_comm_s"] == 0.0
    assert r.goodput == 1.0


def test_data_parallel_across_sites_on_a_slow_link_is_slower():
    """4 sites on a 10 Gbps ring: the exposed all-reduce lowers goodput and delays the token budget."""
    common = dict(
        cluster={"chips": 1000, "sites": 4}, workload={"params": "1B", "tokens_per_step": "4M"}, token_budget="1B"
    )
    fast = simulate_scale(plan(network={"bandwidth": 0}, **common))
    slow = simulate_scale(plan(network={"bandwidth": 10}, **common))
    # ring: 2 * 3/4 * 16 Gbit / 10 Gbps = 2.4 s exposed per 1 s step
    assert slow.details["exposed_comm_s"] == pytest.approx(2.4)
    assert fast.details["exposed_comm_s"] == 0.0
    assert slow.goodput == pytest.approx(1 / 3.4)
    assert fast.goodput == 1.0
    assert fast.time_to_budget_s == pytest.approx(250.0)
    assert slow.time_to_budget_s == pytest.approx(250 * 3.4)
    assert slow.time_to_budget_s > fast.time_to_budget_s


def test_dp_overlap_hides_part_of_the_all_reduce():
    """dp_overlap hides up to dp_overlap * step_s of the all-reduce behind the step."""
    common = dict(cluster={"chips": 1000, "sites": 4}, workload={"params": "1B", "step_s": 2})
    none = simulate_scale(plan(network={"bandwidth": 10, "dp_overlap": 0}, **common))
    half = simulate_scale(plan(network={"bandwidth": 10, "dp_overlap": 0.5}, **common))
    assert none.details["exposed_comm_s"] == pytest.approx(2.4)
    assert half.details["exposed_comm_s"] == pytest.approx(1.4)
    assert half.goodput > none.goodput


# ---- token budget ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["data-parallel", "sync-diloco", "decoupled"])
def test_token_budget_stops_the_run(mode):
    """When the merged tokens reach the budget the run ends there: wall == time to budget, merged >= budget."""
    budget = 500_000  # 500 steps' worth of 1000 tokens
    r = simulate_scale(plan(mode, token_budget=budget))
    assert r.time_to_budget_s is not None
    assert r.wall_s == r.time_to_budget_s
    assert r.wall_s < 3600
    assert r.merged_tokens >= budget
    check_invariants(r)


@pytest.mark.parametrize("mode", ["data-parallel", "sync-diloco", "decoupled"])
def test_unreachable_budget_leaves_time_to_budget_none(mode):
    """A budget beyond what the run can merge: time_to_budget_s is None and the run lasts its duration."""
    r = simulate_scale(plan(mode, token_budget="1T"))
    assert r.time_to_budget_s is None
    assert r.wall_s == 3600.0
    assert r.merged_tokens < 1e12


def test_budget_time_is_when_tokens_were_merged():
    """Data-parallel without failures reaches N steps' tokens at N * step_s."""
    r = simulate_scale(plan(token_budget=123_000, workload={"step_s": 2}))
    assert r.time_to_budget_s == pytest.approx(246.0)
    assert r.merged_tokens == 123_000
    assert r.updates == 123


def test_budget_reached_with_a_rollback_at_the_same_instant():
    """BUG CHECK: if a rollback lands at the instant the budget is reached, merged tokens must not fall short of it."""
    # Steps end at 1..100 s; the failure at 100 s rolls back to the checkpoint at 90 s. The budget of 100 steps is
    # only touched for an instant, so either it is not reached then, or the reported merged tokens reach it.
    r = simulate_scale(
        plan(
            elastic=False,
            duration=1000,
            token_budget=100 * 1000,
            recovery={"checkpoint_every_s": 30},
            failures=one_failure(100),
        )
    )
    if r.time_to_budget_s is not None:
        assert r.merged_tokens >= 100 * 1000, (r.time_to_budget_s, r.merged_tokens)


@pytest.mark.parametrize("mode", ["data-parallel", "sync-diloco", "decoupled"])
def test_failures_after_the_budget_are_not_counted(mode):
    """BUG CHECK: the run ends at the budget, so a failure scheduled after that time is not one of its failures."""
    r = simulate_scale(plan(mode, duration=1000, token_budget=100_000, failures=one_failure(900)))
    assert r.time_to_budget_s is not None and r.time_to_budget_s < 900
    assert r.failures == 0


# ---- DiLoCo with a learner down ------------------------------------------------------------------------------
def test_sync_diloco_waits_for_a_failed_learner():
    """Sync DiLoCo's round cannot merge without the failed learner: the global stall covers its outage."""
    r = simulate_scale(
        plan(
            "sync-diloco",
            sync_every=10,
            fragments=1,
            elastic=False,
            failures=one_failure(600, learner=1, down_s=300),
        )
    )
    assert r.failures == 1
    assert r.longest_stall_s >= 300
    assert 600 <= r.longest_stall_at <= 600 + 10


def test_decoupled_does_not_wait_for_a_failed_learner():
    """Decoupled DiLoCo with K = 1 keeps merging from the others: its longest stall is far shorter than sync's."""
    kw = dict(elastic=False, failures=one_failure(600, learner=1, down_s=300))
    sync = simulate_scale(plan("sync-diloco", sync_every=8, fragments=1, **kw))
    dec = simulate_scale(plan("decoupled", sync_every=8, fragments=4, quorum=1, **kw))
    assert dec.failures == sync.failures == 1
    assert sync.longest_stall_s >= 300
    assert dec.longest_stall_s < 30
    assert dec.longest_stall_s * 10 < sync.longest_stall_s
    # only the failed learner's 300 s (of 4 learners * 3600 s) are lost to training
    assert dec.goodput == pytest.approx(1 - 300 / (4 * 3600), abs=0.005)


def test_sync_diloco_elastic_pauses_where_non_elastic_redoes_the_round():
    """Mid-round, a non-elastic learner redoes its work after the outage; an elastic one resumes where it paused."""
    kw = dict(
        duration=100,
        cluster={"chips": 2},
        workload={"step_s": 1, "tokens_per_step": 10},
        failures=one_failure(25, learner=1, down_s=5),
    )
    ne = plan("sync-diloco", learners=2, sync_every=10, fragments=1, elastic=False, **kw)
    el = plan("sync-diloco", learners=2, sync_every=10, fragments=1, elastic=True, **kw)
    t_ne = sync_diloco.run(ne, unit_outages(ne, 100.0))
    t_el = sync_diloco.run(el, unit_outages(el, 100.0))
    assert t_ne.update_times[:3].tolist() == [10.0, 20.0, 40.0]  # 5 s done, 5 s out, 10 s redone
    assert t_el.update_times[:3].tolist() == [10.0, 20.0, 35.0]  # 5 s done, 5 s paused, 5 s left
    assert t_ne.details["redone_work_s"] == 5.0
    assert t_el.details["redone_work_s"] == 0.0


def test_sync_diloco_goodput_falls_with_more_failures():
    """More frequent failures lower sync DiLoCo's goodput (each stalls every learner)."""
    kw = dict(learners=4, sync_every=8, fragments=1, cluster={"chips": 400}, elastic=False, seed=1)
    rare = simulate_scale(plan("sync-diloco", failures={"mtbi_per_chip": 400 * 36000}, **kw))
    often = simulate_scale(plan("sync-diloco", failures={"mtbi_per_chip": 400 * 600}, **kw))
    assert often.failures > rare.failures
    assert often.goodput < rare.goodput


# ---- decoupled: links -------------------------------------------------------------------------------------------
def test_decoupled_link_too_slow_for_the_fragment_rate_loses_merged_goodput():
    """A fragment round trip longer than the fragment period: syncs are skipped and merged goodput drops."""
    common = dict(workload={"params": "1B"}, sync_every=8, fragments=4)  # fragment = 0.5 GB = 4 Gbit, period 2 s
    fast = simulate_scale(plan("decoupled", network={"bandwidth": 0}, **common))
    slow = simulate_scale(plan("decoupled", network={"bandwidth": 1}, **common))  # 4 s up, 4 s down
    assert slow.details["fragment_round_trip_s"] == pytest.approx(8.0)
    assert slow.details["fragment_period_s"] == pytest.approx(2.0)
    assert slow.details["skipped_syncs"] > 0
    assert slow.merged_goodput < fast.merged_goodput
    assert slow.goodput == fast.goodput == 1.0  # training itself never waits


def test_decoupled_round_trip_beyond_tau_overwrites_more_steps():
    """A fragment coming back later than tau steps overwrites more local steps: merged goodput drops."""
    fast = simulate_scale(plan("decoupled", workload={"params": "1B"}, network={"bandwidth": 32}))  # 0.25 s trip
    late = simulate_scale(plan("decoupled", workload={"params": "1B"}, network={"bandwidth": 2}))  # 4 s trip
    assert late.details["skipped_syncs"] == 0
    assert late.merged_goodput < fast.merged_goodput


def test_decoupled_slow_link_merges_keep_pace_with_a_longer_run():
    """BUG CHECK: with a link 2x too slow, a 4x longer run merges about 4x as often (the lag must not grow forever).

    A skipped sync sends nothing, so it must not hold the link; otherwise the upload queue, and with it every
    upload's lag, grows without bound and merged goodput decays towards 0 as the run gets longer.
    """
    common = dict(workload={"params": "1B"}, sync_every=8, fragments=4, network={"bandwidth": 1})
    short = simulate_scale(plan("decoupled", duration=900, **common))
    long = simulate_scale(plan("decoupled", duration=3600, **common))
    assert long.details["merges"] >= 3 * short.details["merges"], (short.details, long.details)
    assert long.merged_goodput >= 0.75 * short.merged_goodput, (short.merged_goodput, long.merged_goodput)


# ---- engine: determinism, progress, timeline --------------------------------------------------------------
@pytest.mark.parametrize("mode", ["data-parallel", "sync-diloco", "decoupled"])
def test_simulation_is_deterministic_for_a_seed(mode):
    """The same plan gives the same figures; another seed draws other failures."""
    kw = dict(cluster={"chips": 1000}, failures={"mtbi_per_chip": 1000 * 3600}, seed=5)
    a, b = simulate_scale(plan(mode, **kw)), simulate_scale(plan(mode, **kw))
    assert a.to_json() == b.to_json()
    c = simulate_scale(plan(mode, **{**kw, "seed": 6}))
    assert c.to_json() != a.to_json()


def test_progress_reports_start_and_end():
    """progress(stage, fraction) starts with failures at 0 and ends with done at 1, fractions in [0, 1]."""
    calls = []
    simulate_scale(plan("decoupled"), progress=lambda stage, f: calls.append((stage, f)))
    assert calls[0] == ("failures", 0.0)
    assert calls[-1] == ("done", 1.0)
    assert all(0.0 <= f <= 1.0 for _, f in calls)


def test_timeline_is_kept_only_when_asked():
    """timeline=True records per-unit segments inside the run; the default keeps none."""
    cfg = plan(
        "sync-diloco", sync_every=8, fragments=1, duration=200, elastic=False, failures=one_failure(50, learner=2)
    )
    assert simulate_scale(cfg).timeline is None
    tl = simulate_scale(cfg, timeline=True).timeline
    assert tl is not None and tl.segments
    assert {s.unit for s in tl.segments} == {0, 1, 2, 3}
    assert all(0 <= s.start < s.end <= 200 for s in tl.segments)
    assert any(s.state == "down" and s.unit == 2 for s in tl.segments)


def test_result_json_and_summary():
    """to_json carries the figures; summary names the mode and the goodput."""
    r = simulate_scale(plan("sync-diloco"))
    j = r.to_json()
    assert j["mode"] == "sync-diloco" and j["learners"] == 4 and j["goodput"] == round(r.goodput, 5)
    assert j["time_to_budget_s"] is None
    assert "sync-diloco M=4" in r.summary() and "goodput 100.0%" in r.summary()


# ---- properties --------------------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(
    mode=st.sampled_from(["data-parallel", "sync-diloco", "decoupled"]),
    learners=st.integers(1, 4),
    elastic=st.booleans(),
    seed=st.integers(0, 2**16),
    mtbi_factor=st.sampled_from([0, 300, 3000, 30000]),
    sites=st.integers(1, 3),
    bandwidth=st.sampled_from([0, 1, 20]),
    step_s=st.sampled_from([0.5, 1.0, 2.5]),
    checkpoint=st.sampled_from([0, 60]),
    rejoin=st.sampled_from([0, 20]),
    budget=st.sampled_from([0, 2e5, 1e12]),
)
def test_figures_are_consistent_in_every_mode(
    mode, learners, elastic, seed, mtbi_factor, sites, bandwidth, step_s, checkpoint, rejoin, budget
):
    """For any small plan: 0 <= goodputs <= 1, merged <= trained, stall within the wall, budget bookkeeping sane."""
    chips = 40
    cfg = plan(
        mode,
        learners=learners,
        quorum=1 if mode == "decoupled" else None,
        elastic=elastic,
        seed=seed,
        duration=1800,
        token_budget=budget,
        cluster={"chips": chips, "sites": sites},
        workload={"step_s": step_s, "params": "100M"},
        network={"bandwidth": bandwidth},
        failures={"mtbi_per_chip": chips * mtbi_factor},
        recovery={"checkpoint_every_s": checkpoint, "rejoin_s": rejoin},
    )
    r = simulate_scale(cfg)
    check_invariants(r)
    if r.time_to_budget_s is None:
        assert r.wall_s == 1800.0
    else:
        assert r.wall_s == r.time_to_budget_s <= 1800.0
    assert r.updates >= 0 and r.failures >= 0


def test_a_budget_of_trained_tokens_ends_decoupled_runs_earlier_than_one_of_merged_tokens() -> None:
    """budget_counts: trained stops when the learners have trained the budget (the real syncer's count);
    merged waits until that much reached the global model, later since overlap steps are overwritten."""
    tree = {
        "duration": 3600,
        "token_budget": 500_000,
        "failures": {"mtbi_per_chip": 0},
        "workload": {"step_s": 1, "tokens_per_step": 1000},
        "algorithm": {"mode": "decoupled", "num_learners": 4, "num_fragments": 4, "sync_every": 8},
    }
    merged = simulate_scale(build_scale_config(tree))
    trained = simulate_scale(build_scale_config({**tree, "budget_counts": "trained"}))
    assert trained.time_to_budget_s == pytest.approx(500.0, abs=1e-3)  # 1000 tokens a second, exactly
    assert trained.trained_tokens == pytest.approx(500_000, rel=1e-6)
    assert merged.time_to_budget_s is not None and trained.time_to_budget_s is not None
    assert merged.time_to_budget_s > trained.time_to_budget_s
    assert merged.merged_tokens >= 500_000


def test_a_slow_learner_holds_back_sync_diloco_but_not_decoupled() -> None:
    """Heterogeneous hardware: one learner at half speed makes sync DiLoCo wait every round (goodput ~5/8);
    Decoupled learners each step at their own pace (goodput 1) and the grace window still merges the slow one."""
    base = {
        "duration": 3600,
        "failures": {"mtbi_per_chip": 0},
        "workload": {"step_s": 1, "tokens_per_step": 4000, "step_s_overrides": {3: 2}},
    }
    sync = simulate_scale(
        build_scale_config({**base, "algorithm": {"mode": "sync-diloco", "num_learners": 4, "sync_every": 8}})
    )
    dec = simulate_scale(
        build_scale_config(
            {**base, "algorithm": {"mode": "decoupled", "num_learners": 4, "num_fragments": 4, "sync_every": 8}}
        )
    )
    # nominal: 3 learners at 1000 tokens/s + one at 500; sync rounds run at the slow one's pace: 4 × 500.
    assert sync.goodput == pytest.approx(2000 / 3500, abs=0.01)
    assert dec.goodput == pytest.approx(1.0, abs=0.01)
    # On the syncer's clock every learner syncs every round: a fast one covers H = 8 of its steps per round, the
    # slow one 4; the τ = 2 steps after each sync are overwritten: (3 × 1000 × 6/8 + 500 × 2/4) / 3500.
    assert dec.merged_goodput == pytest.approx((3 * 1000 * 6 / 8 + 500 * 2 / 4) / 3500, abs=0.01)
    assert dec.details["participants_per_merge"] == pytest.approx(4, abs=0.05)  # the slow one is in every round
    assert dec.merged_tokens > 1.2 * sync.merged_tokens  # 3600 s × 2500 against 3600 s × 2000 tokens/s


def test_replica_sit_outs_cost_decoupled_goodput_too() -> None:
    """Elastic learners with replace_s train on fewer replicas after a failure: goodput (not only merged) drops."""
    tree = {
        "duration": 3600,
        "elastic": True,
        "cluster": {"chips": 400, "chips_per_replica": 10},
        "failures": {"mtbi_per_chip": 0, "schedule": [{"at": 100, "learner": 1, "down_s": 20}]},
        "workload": {"step_s": 1, "tokens_per_step": 4000},
        "algorithm": {"mode": "decoupled", "num_learners": 4, "num_fragments": 4, "sync_every": 8},
    }
    base = simulate_scale(build_scale_config(tree))
    slow = simulate_scale(build_scale_config({**tree, "recovery": {"replace_s": 1000}}))
    # learner 1 has 10 replicas; one sits out from the pause's end (120 s) to 1100 s: 980 s of a tenth of
    # its 1000 tokens a second.
    lost = 980 * 100
    assert base.goodput * 3600 * 4000 - slow.goodput * 3600 * 4000 == pytest.approx(lost, rel=1e-6)
    assert base.merged_tokens - slow.merged_tokens == pytest.approx(lost, rel=1e-6)


def test_after_a_pause_a_decoupled_learner_is_back_on_the_shared_round_schedule() -> None:
    """The syncer's clock: a learner paused for 3.5 steps syncs at its last boundary at or before each later
    opening, so every later round gathers all four (on its own step count it would stay 3.5 steps out of phase
    and its uploads would merge apart from the others' for the rest of the run)."""
    tree = {
        "duration": 3600,
        "elastic": True,
        "failures": {"mtbi_per_chip": 0, "schedule": [{"at": 100, "learner": 1, "down_s": 3.5}]},
        "workload": {"step_s": 1, "tokens_per_step": 4000},
        "algorithm": {"mode": "decoupled", "num_learners": 4, "num_fragments": 4, "sync_every": 8},
    }
    r = simulate_scale(build_scale_config(tree))
    assert r.details["merges"] == pytest.approx(3600 / 2, abs=4)  # one merge per round: a fragment every 2 s
    assert r.details["participants_per_merge"] > 3.99


def test_decoupled_late_uploads_refused_or_carried():
    """A link too slow for the fragment rate, and failures that put learners out of step with the rounds (with
    equal learners in step, every header makes its round: trainer.core.inflight): with ``late_uploads: refuse``
    late uploads miss their merge; with ``carry`` none is refused as late, each is carried into the next round
    (the trainer's SyncerState) and more work is merged."""
    common = dict(
        workload={"params": "1B"},
        sync_every=8,
        fragments=4,
        network={"bandwidth": 1},
        failures={"mtbi_per_chip": "3d"},
    )
    refuse = simulate_scale(plan("decoupled", **common))
    alg = {"mode": "decoupled", "num_learners": 4, "num_fragments": 4, "sync_every": 8, "late_uploads": "carry"}
    carry = simulate_scale(plan("decoupled", **{**common, "algorithm": alg}))
    assert refuse.failures > 0
    assert refuse.details["refused_late"] > 0 and refuse.details["late_carried"] == 0
    assert carry.details["refused_late"] == 0 and carry.details["late_carried"] > 0
    assert carry.merged_goodput > refuse.merged_goodput


def test_decoupled_rounds_over_a_slow_link_take_every_header_that_made_it():
    """A fragment round trip of many steps: with τ = 2 the grace window is shut and each round merges at its
    first upload's arrival — but every learner's header was in by then, so the round waits for their bodies and
    takes them all (trainer.core.inflight; when rounds counted bodies, the others were late and only
    ``overlap_steps: auto`` gathered them). Either τ gathers every learner."""
    common = dict(workload={"params": "200M"}, sync_every=8, fragments=4, network={"bandwidth": 0.5})  # 1.6 s up
    fixed = simulate_scale(plan("decoupled", **common))
    alg = {"mode": "decoupled", "num_learners": 4, "num_fragments": 4, "sync_every": 8, "overlap_steps": "auto"}
    auto = simulate_scale(plan("decoupled", **{**common, "algorithm": alg}))
    assert fixed.details["fragment_round_trip_s"] > 2 * 1.0  # more than τ = 2 steps of 1 s
    for r in (fixed, auto):
        assert r.details["participants_per_merge"] == 4.0 and r.details["refused_late"] == 0, r.details


@pytest.mark.parametrize("reason", ["", *sorted(r.value for r in RejectReason)])
def test_an_uploads_outcome_moves_with_the_versions(reason: str) -> None:
    """The decoupled model asks upload_outcome once per (reason, base - version) and adds the version: that holds
    only while what a learner wants after a reply is relative to what it and the syncer hold (accepted: no reason;
    refused: one). Every small case, not a sample: a floor or cap on one version shows only in a few."""
    for base, version, shift in itertools.product(range(6), range(6), range(1, 6)):
        moved = upload_outcome(not reason, reason, base + shift, version + shift).want
        want = upload_outcome(not reason, reason, base, version).want
        assert moved == (None if want is None else want + shift), (base, version, shift)
