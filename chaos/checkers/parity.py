"""Parity: the chaos run's final eval loss lies within ``tolerance`` of the fault-free band.

One fault-free run is a single draw of run-to-run noise, so a bound around it
alone flips with the seed and the machine's load. The band comes from the
fault-free baselines at several cluster seeds (the run's own first). Each seed
draws its own Markov source, whose entropy floor differs by more than the noise
(e.g. 2.386, 2.359, 2.290 for seeds 0–2), so the band is taken over each
baseline's *excess over its own floor* and placed on this run's floor:

    band  = floor + [min excess, max excess]
    pass  ⇔  min(band) − tolerance ≤ loss ≤ max(band) + tolerance

The verdict shows the band, its seeds, and how far outside it the run landed.

Example:
    >>> band_distance(2.50, (2.40, 2.45)), band_distance(2.42, (2.40, 2.45)), band_distance(2.3, (2.40, 2.45))
    (0.05, 0.0, -0.1)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev


def band_distance(loss: float, band: tuple[float, float]) -> float:
    """How far ``loss`` lies above the band's top (> 0), below its bottom (< 0), or 0 inside it."""
    lo, hi = band
    return round(loss - hi, 12) if loss > hi else round(loss - lo, 12) if loss < lo else 0.0


def band_origin(floor: float | None) -> float:
    """Where a run's band is placed: its task's entropy floor where one is known (each seed draws its own Markov
    source, so raw losses differ by the task), else 0 — real text is one corpus and one eval split for every seed,
    so its raw losses compare as they are.

    >>> band_origin(2.39), band_origin(None), band_origin(float("nan"))
    (2.39, 0.0, 0.0)
    """
    return floor if floor is not None and math.isfinite(floor) else 0.0


CONFIDENCE = 0.99  # of the derived tolerance's prediction bound: one fault-free run in 100 would fail it


def derived_tolerance(excess: tuple[float, ...] | list[float]) -> float | None:
    """Half-width of a 99% prediction interval for one more fault-free run's excess, from the band's n ≥ 3 runs:
    t(n−1, 0.995) · sd · √(1 + 1/n) (None: fewer than 3 runs).

    >>> round(derived_tolerance([0.0516, 0.0495, 0.0461]), 4)   # the committed real-run band: sd 0.0028
    0.0318
    >>> derived_tolerance([0.05, 0.05]) is None
    True
    """
    from scipy.stats import t  # noqa: PLC0415 - scipy is slow to import: only when a tolerance is derived

    n = len(excess)
    if n < 3:
        return None
    return float(t.ppf(0.5 + CONFIDENCE / 2, n - 1) * np.std(excess, ddof=1) * math.sqrt(1 + 1 / n))


def tolerance_of(parity: Any, excess: tuple[float, ...] | list[float]) -> float | None:
    """The tolerance a run is judged with: the scenario's number, or derived from its band (None: not derivable)."""
    return derived_tolerance(excess) if parity.tolerance == "derived" else float(parity.tolerance)


def still_falling(
    evals: list[tuple[int, float]], final_loss: float, budget_tokens: int, tail: float = 0.2
) -> float | None:
    """How much the eval loss fell over the last ``tail`` of the budget's tokens (None: no eval that early).

    A run whose loss still fell by more than the check's detectable effect when it stopped is judged at a moment
    the comparison is sensitive to: a little more or less training moves the loss as much as a fault would.

    >>> still_falling([(0, 4.0), (700, 2.6), (800, 2.5), (1000, 2.45)], 2.45, 1000)
    0.05
    >>> still_falling([(900, 2.5)], 2.45, 1000) is None
    True
    """
    cut = budget_tokens * (1 - tail)
    before = [loss for tokens, loss in evals if tokens <= cut]
    return None if not before or not budget_tokens else round(before[-1] - final_loss, 12)


def check_parity(inp: CheckInput) -> Verdict:
    tol = tolerance_of(inp.checks.parity, inp.baseline_band)
    if tol is None:
        return Verdict(
            "parity",
            "indeterminate",
            f"tolerance: derived needs the final losses of >= 3 fault-free seeds; "
            f"the band has {len(inp.baseline_band)}",
        )
    finals = [e for e in inp.history.of(ev.Eval) if e.final]
    if not finals:
        return Verdict("parity", "indeterminate", "the run has no final evaluation (it did not reach its budget)")
    if inp.baseline_final_loss is None or not math.isfinite(inp.baseline_final_loss):
        return Verdict("parity", "indeterminate", "no fault-free baseline to compare with")
    if not all(math.isfinite(x) for x in inp.baseline_band):
        return Verdict(
            "parity", "indeterminate", f"a fault-free baseline has a non-finite final loss: {inp.baseline_band}"
        )
    loss, base = finals[-1].loss, inp.baseline_final_loss
    known_floor = math.isfinite(finals[-1].loss_floor)  # real text: NaN, and the band's origin is 0
    floor = band_origin(finals[-1].loss_floor)
    if inp.baseline_band:
        lo, hi = floor + min(inp.baseline_band), floor + max(inp.baseline_band)
        if len(inp.baseline_band) == 1:  # baseline_seeds: 1, the same-seed run alone
            where = f"the fault-free run {lo:.4f} (floor {floor:.4f} + excess {lo - floor:.4f}; one seed, no band)"
        elif not known_floor:
            where = (
                f"fault-free band {lo:.4f}–{hi:.4f} over {len(inp.baseline_band)} seed(s) (real text: one corpus "
                "and eval split for every seed, so raw losses)"
            )
        else:
            where = (
                f"fault-free band {lo:.4f}–{hi:.4f} (floor {floor:.4f} + excess {min(inp.baseline_band):.4f}–"
                f"{max(inp.baseline_band):.4f} over {len(inp.baseline_band)} seed(s))"
            )
    else:
        lo = hi = base
        where = f"baseline {base:.4f}"
    out = band_distance(loss, (lo, hi)) if math.isfinite(loss) else math.inf
    # The power the check has: the smallest rise of the final loss over the same-seed fault-free run it would fail.
    detectable = hi + tol - base
    evals = [(e.tokens_total, e.loss) for e in inp.history.of(ev.Eval) if not e.final]
    fell = still_falling(evals, loss, inp.facts.token_budget)
    falling = fell is not None and fell > detectable
    evidence = {
        "final_eval_loss": loss,
        "baseline_final_eval_loss": base,
        "delta": loss - base,
        "band": {"low": lo, "high": hi, "excess": list(inp.baseline_band), "width": hi - lo},
        "outside_band": out,
        "tolerance": tol,
        "min_detectable_increase": round(detectable, 6),
        "fell_over_last_fifth": fell,
        "still_falling": falling,
        # real text has no known floor: the band's origin (0) is no floor to report a gap to
        **(
            {"loss_floor": floor, "gap_to_floor": loss - floor, "baseline_gap_to_floor": base - floor}
            if known_floor
            else {"loss_floor": None}
        ),
    }
    derived = (
        f", derived from the band's spread over {len(inp.baseline_band)} seeds"
        if inp.checks.parity.tolerance == "derived"
        else ""
    )
    power = f"detects a rise of {detectable:.4f} over the same-seed run" + (
        f"; the loss still fell {fell:.4f} over the last fifth of the budget, more than that" if falling else ""
    )
    if not math.isfinite(loss) or abs(out) > tol:
        return Verdict(
            "parity",
            "fail",
            f"final eval loss {loss:.4f} vs {where}: outside by {out:+.4f} "
            f"(tolerance ±{tol:.4g}{derived}; {power})",
            evidence,
        )
    inside = "inside it" if out == 0 else f"{out:+.4f} outside"
    return Verdict(
        "parity",
        "pass",
        f"final eval loss {loss:.4f} vs {where}: {inside} (tolerance ±{tol:.4g}{derived}; "
        f"same-seed baseline {base:.4f}; {power})",
        evidence,
    )
