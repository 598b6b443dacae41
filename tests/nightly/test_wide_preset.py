"""Nightly: the wide preset (6.6M parameters: 53 MB of parameters and outer momentum) through a syncer crash.

The syncer is SIGKILLed and restarted: it restores ≥ 50 MB of state from its newest checkpoint, and every learner
rejoins it and is merged again (reintegration), with nothing lost (durability, ledger, audit: every merge chained
across the restore). No fault-free baseline: the point is the state's size, not the final loss.
"""

from __future__ import annotations

import pytest

from chaos.history import History
from chaos.scenario import scenario_with
from trainer import events as ev
from trainer.presets import PRESETS

pytestmark = pytest.mark.chaos_nightly(minutes=4)  # 3.7 min measured 2026-12-04


@pytest.mark.chaos
@pytest.mark.timeout(3600)
def test_a_syncer_crash_with_50_mb_of_state_rejoins(run_chaos) -> None:
    scenario = scenario_with(
        "syncer-crash",
        cluster=dict(PRESETS["wide"].cluster),
        timeout_s=1800,
        checks={"parity": {"enabled": False}},
    )
    result = run_chaos(scenario, baseline=False)
    judged = {v.name: v for v in result.verdicts}
    failed = [
        f"{v.name}: {v.summary}" for v in result.verdicts if v.status not in ("pass",) and v.name != "parity"
    ]
    assert not failed, failed
    assert judged["reintegration"].evidence["learners"], judged["reintegration"].evidence
    h = History.read(result.out_dir)
    restores = h.of(ev.Restore)
    assert restores, "the restarted syncer restored no checkpoint"
    ckpt = max((result.out_dir / "checkpoints").glob("ckpt-*.npz"), key=lambda p: p.stat().st_size)
    assert ckpt.stat().st_size >= 50e6, f"{ckpt}: {ckpt.stat().st_size:,} bytes"
