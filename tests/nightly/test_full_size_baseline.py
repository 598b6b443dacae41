"""Nightly: the small preset's fault-free run, which test_full_size_parity.py judges its chaos runs against.

A test of its own so that it runs on the other worker while the parity test's chaos run runs (the session's
baseline cache is shared, and locked while a baseline is computed). On its own it checks that the small model
trains to its budget without faults and learns.
"""

from __future__ import annotations

import math

import pytest

from chaos.controller import RunOptions, fault_free_runs
from chaos.scenario import scenario_with
from tests.nightly.test_full_size_parity import FULL_SIZE

pytestmark = pytest.mark.chaos_nightly(minutes=14)  # as long as the parity test: the two start first, together


@pytest.mark.chaos
@pytest.mark.timeout(7200)
def test_the_small_model_trains_to_its_budget_without_faults(
    chaos_toxiproxy, chaos_baseline_cache, tmp_path
) -> None:
    scenario = scenario_with("kill-and-rejoin", **FULL_SIZE)  # every built-in has this cluster: one baseline
    baseline = fault_free_runs(
        scenario,
        RunOptions(
            tmp_path, toxiproxy_url=chaos_toxiproxy.url, baseline_cache=chaos_baseline_cache, progress=print
        ),
    )
    assert baseline.band is not None and len(baseline.band.losses) == 1
    assert math.isfinite(baseline.final_eval_loss)
    # From ~5.6 at the start (log of the vocabulary) to ~2.56 at 1.5M tokens (2026-12-04), far above what compressors
    # reach on this text (1.69 nats/byte, docs/trainer.md): real text, still being learnt.
    assert baseline.final_eval_loss < 3.0, baseline
