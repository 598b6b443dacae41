"""Invariants ``weight``, ``budget`` and ``value`` (docs/security.md) over generated claims, each with its negative
control: the same property run with the defence removed, on a claim it must then let through.

The pure core, time as plain floats. Two honest learners report a 0.1 s step (the cluster's pace); an insider
(L2) claims whatever the strategies draw.

- ``weight``: whatever step count an upload claims, the merge counts at most the steps time allows since the
  insider joined: ``max_speedup`` × elapsed / pace + slack.
- ``budget``: however often it reports and under however many incarnations, the tokens counted for its id are
  at most ``per`` × (``max_speedup`` × elapsed / pace + slack).
- ``value``: an upload moving any one coordinate further than its steps of inner AdamW can is refused, however
  small the rest of it (and so however small its L2 norm); one within the bound everywhere is accepted.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_core_syncer_state import contrib, join_all, make_state
from trainer.core.claims import ADAM_STEP_BOUND
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.syncer_policy import STEP_SLACK
from trainer.core.syncer_state import SyncerState
from trainer.core.token_allowance import Allowance

PER, SPEEDUP, PACE, SLACK = 64, 4.0, 0.1, STEP_SLACK + 2  # overlap floor 2


def paced() -> SyncerState:
    s = make_state(tokens_per_step=PER, max_speedup=SPEEDUP, overlap_steps=2, inner_lr=1e-3, outer_momentum=0.0)
    join_all(s, 3)
    for lid in ("L0", "L1"):
        s.report(lid, "inc-1", step=0, tokens=0, step_time_s=PACE, now=0.0)
    return s


def allowed_steps(elapsed: float) -> float:
    return SPEEDUP * elapsed / PACE + SLACK


# ---- weight -----------------------------------------------------------------------------------------------
def check_weight(claims: list[tuple[float, int]]) -> None:
    s = paced()
    now = 0.0
    for dt, c_steps in claims:
        now += dt
        c = contrib("L2", "inc-1", 0, s.versions[0], {"w": np.zeros(4, np.float32)}, c_steps, PER * c_steps)
        s.submit(c, now=now)
        (p,) = s.merge(0, now=now).participants
        assert p.c_steps <= allowed_steps(now) and p.c_tokens == PER * p.c_steps, (p.c_steps, allowed_steps(now))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 5.0), st.integers(1, 2**40)), min_size=1, max_size=6))
def test_no_claim_weighs_more_than_the_steps_time_allows(claims) -> None:
    check_weight(claims)


def test_weight_negative_control(monkeypatch) -> None:
    """With claims uncapped, one upload claiming 10⁹ steps a second after joining weighs 10⁹ steps."""
    monkeypatch.setattr(SyncerState, "_bounded", lambda self, c, now: c)
    with pytest.raises(AssertionError):
        check_weight([(1.0, 10**9)])


# ---- budget -----------------------------------------------------------------------------------------------
def check_budget(reports: list[tuple[float, bool]]) -> None:
    s = paced()
    now, inc = 0.0, 1
    for dt, rejoin in reports:
        now += dt
        if rejoin:
            inc += 1
            s.join("L2", f"inc-{inc}", now=now)
        s.report("L2", f"inc-{inc}", step=10**9, tokens=PER * 10**9, step_time_s=PACE, now=now)
        counted = sum(v for k, v in s.tokens_by_incarnation.items() if k.startswith("L2/"))
        assert counted <= PER * allowed_steps(now), (counted, PER * allowed_steps(now))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 0.5), st.booleans()), min_size=1, max_size=60))
def test_no_report_pattern_counts_more_tokens_than_time_allows(reports) -> None:
    check_budget(reports)


def test_budget_negative_control(monkeypatch) -> None:
    """With each report counted in full, one report claiming 10⁹ steps counts them all."""
    monkeypatch.setattr(Allowance, "counting", lambda self, claimed, per, bounded=True: (self, max(claimed, 0)))
    with pytest.raises(AssertionError):
        check_budget([(0.01, False)])


# ---- value ------------------------------------------------------------------------------------------------
def coordinate_bound(c_steps: int) -> float:
    return c_steps * 1e-3 * ADAM_STEP_BOUND  # |θ| = 0: weight decay adds nothing


def check_value(index: int, factor: float, c_steps: int, n: int) -> None:
    """One coordinate at ``factor`` × its bound, the rest zero: refused iff factor > 1."""
    s = paced()
    t = np.zeros(n, np.float32)
    t[index % n] = np.float32(factor * coordinate_bound(c_steps))
    c = contrib("L2", "inc-1", 0, s.versions[0], {"w": t}, c_steps, PER * c_steps)
    try:
        s.submit(c, now=100.0)
    except Rejected as err:
        assert factor > 1.0, f"an update within the bound was refused: {err}"
        assert err.reason is RejectReason.OUTLIER_NORM
        return
    assert factor <= 1.0, f"coordinate {index % n} moved {factor:.3g} × what {c_steps} steps can and was accepted"


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(0, 10**6),
    factor=st.one_of(st.floats(0.0, 0.99), st.floats(1.01, 1e6)),
    c_steps=st.integers(1, 64),
)
def test_no_coordinate_moves_further_than_its_steps_can(index, factor, c_steps) -> None:
    check_value(index, factor, c_steps, n=4)


def test_value_negative_control(monkeypatch) -> None:
    """With the per-coordinate bound removed (the fragment's L2 bound left), one coordinate may take 1.9× its
    bound: the whole fragment's L2 budget is √n = 2 times larger."""
    monkeypatch.setattr("trainer.core.upload_checks.check_coordinates", lambda *a, **k: None)
    with pytest.raises(AssertionError):
        check_value(0, 1.9, 1, n=4)
