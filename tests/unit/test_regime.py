"""chaos.regime: the warning judges the fault-free part after start-up, or the baseline when that is too short."""

from chaos.regime import MIN_MERGES, calm_merges, regime_warnings

ALL = ["learner-0", "learner-1", "learner-2", "learner-3"]


def _run(startup: int, steady: int, per_merge: int) -> list[tuple[float, list[str]]]:
    """``startup`` merges of learner-0 alone (the others still compiling), then ``steady`` merges of ``per_merge``
    learners each, rotating, one a second."""
    alone = [(float(t), ALL[:1]) for t in range(startup)]
    steady_merges = [(float(startup + t), [ALL[(t + k) % 4] for k in range(per_merge)]) for t in range(steady)]
    return alone + steady_merges


def test_start_up_is_not_the_regime() -> None:
    # The main job on 2 cores (2026-12-02): learner-0 merged alone for 14 merges while the others compiled, then
    # 2.5 of 4 per merge; counting the start-up said "1.4 of 4" and warned. Here the start-up alone would pull
    # the mean to (20 + 12·3) / 32 = 1.75 < 2.
    run = _run(startup=20, steady=12, per_merge=3)
    assert regime_warnings(run, first_fault=None, learners=4, mode="decoupled") == []
    assert set(calm_merges(run, first_fault=None, learners=4)) == {3}


def test_a_steady_run_of_one_learner_per_merge_warns() -> None:  # the negative control
    run = _run(startup=14, steady=40, per_merge=1)
    [warning] = regime_warnings(run, first_fault=None, learners=4, mode="decoupled")
    assert warning.startswith("outside the regime: 1.0 of 4 learners per merge before any fault")


def test_a_fault_soon_after_start_up_leaves_the_baseline_to_decide() -> None:
    run = _run(startup=14, steady=40, per_merge=3)
    fault = 14.0 + MIN_MERGES - 1  # too few calm merges of its own
    assert len(calm_merges(run, first_fault=fault, learners=4)) < MIN_MERGES
    assert regime_warnings(run, first_fault=fault, learners=4, mode="decoupled") == []  # no baseline: silent
    bad = _run(startup=3, steady=30, per_merge=1)
    [warning] = regime_warnings(run, first_fault=fault, learners=4, mode="decoupled", baseline=bad)
    assert "in the fault-free baseline" in warning
    good = _run(startup=3, steady=30, per_merge=4)
    assert regime_warnings(run, first_fault=fault, learners=4, mode="decoupled", baseline=good) == []


def test_the_run_s_own_calm_part_is_preferred_to_the_baseline() -> None:
    run = _run(startup=2, steady=40, per_merge=1)
    good = _run(startup=3, steady=30, per_merge=4)
    [warning] = regime_warnings(run, first_fault=None, learners=4, mode="decoupled", baseline=good)
    assert "before any fault" in warning


def test_a_learner_that_never_merges_does_not_hide_the_regime() -> None:
    # Three of four ever take part: start-up ends when those three have, and one per merge still warns.
    run = [(float(t), [ALL[t % 3]]) for t in range(40)]
    assert len(calm_merges(run, first_fault=None, learners=4)) == 38
    assert regime_warnings(run, first_fault=None, learners=4, mode="decoupled")


def test_synchronous_modes_never_warn() -> None:
    run = _run(startup=0, steady=40, per_merge=1)
    assert regime_warnings(run, first_fault=None, learners=4, mode="sync-diloco") == []
