"""Nightly: parity at full model size (the small model), one scenario a night in turn.

The night's longest test (~6 min quiet for each of a fault-free run and a chaos run). Its fault-free run is
test_full_size_baseline.py's, on the other worker at the same time: this test runs its chaos run first
(``baseline_after``) and then reads that baseline from the session's cache (waiting on its lock if need be), so
the two halves overlap instead of one worker carrying both while the other runs out of work (2026-12-03: the
night's last 15 minutes were this test alone)."""

from __future__ import annotations

import pytest

from chaos.scenario import scenario_with

pytestmark = pytest.mark.chaos_nightly(
    minutes=14
)  # half the 26 min measured at 2M tokens (2026-12-03), the pair at once

# The small model (3.3M parameters) at ~3k tokens/s on the 2-core CI machine. 1M tokens, not 2M: the pair was ~40%
# of the night's CPU time (2 x 26 min on 2026-12-03's slow VM). In the eight full-size chaos runs of 2026-12-02/03
# (2M tokens; seven kill-and-rejoin, one syncer-crash) the final loss landed -0.001 ... +0.013 from its baseline,
# and at ~1M tokens a chaos run and its baseline differed by 0.003 (4.121 against 4.124): the tolerance, 0.3 before
# (when runs differed by 0.16, 2026-11-30), is 0.1, still ~7x the largest difference seen. One baseline seed: a
# 3-seed band took three such baselines a night (2026-12-02).
FULL_SIZE = {
    "cluster": {"model": {"size": "small"}, "token_budget": 1_000_000},
    "timeout_s": 2400,
    "checks": {"parity": {"tolerance": 0.1, "baseline_seeds": 1}},
}


@pytest.mark.chaos
@pytest.mark.timeout(7200)
@pytest.mark.chaos_rotate(per_night=1)
@pytest.mark.parametrize("name", ["kill-and-rejoin", "syncer-crash", "partition-majority"])
def test_parity_at_full_model_size(name: str, run_chaos) -> None:
    """The small model (3.3M parameters): same final loss as its fault-free baseline, within the tolerance."""
    result = run_chaos(scenario_with(name, **FULL_SIZE), baseline_after=True)
    failed = [f"{v.name}: {v.summary}" for v in result.verdicts if v.status != "pass"]
    assert result.exit_code == 0, failed
