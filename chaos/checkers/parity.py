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

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev


def band_distance(loss: float, band: tuple[float, float]) -> float:
    """How far ``loss`` lies above the band's top (> 0), below its bottom (< 0), or 0 inside it."""
    lo, hi = band
    return round(loss - hi, 12) if loss > hi else round(loss - lo, 12) if loss < lo else 0.0


def check_parity(inp: CheckInput) -> Verdict:
    tol = inp.checks.parity.tolerance
    finals = [e for e in inp.history.of(ev.Eval) if e.final]
    if not finals:
        return Verdict("parity", "indeterminate", "the run has no final evaluation (it did not reach its budget)")
    if inp.baseline_final_loss is None or not math.isfinite(inp.baseline_final_loss):
        return Verdict("parity", "indeterminate", "no fault-free baseline to compare with")
    if not all(math.isfinite(x) for x in inp.baseline_band):
        return Verdict("parity", "indeterminate", f"a fault-free baseline has a non-finite final loss: "
                                                  f"{inp.baseline_band}")
    loss, base = finals[-1].loss, inp.baseline_final_loss
    floor = finals[-1].loss_floor
    if inp.baseline_band:
        lo, hi = floor + min(inp.baseline_band), floor + max(inp.baseline_band)
        if len(inp.baseline_band) == 1:  # baseline_seeds: 1, the same-seed run alone
            where = f"the fault-free run {lo:.4f} (floor {floor:.4f} + excess {lo - floor:.4f}; one seed, no band)"
        else:
            where = (f"fault-free band {lo:.4f}–{hi:.4f} (floor {floor:.4f} + excess {min(inp.baseline_band):.4f}–"
                     f"{max(inp.baseline_band):.4f} over {len(inp.baseline_band)} seed(s))")
    else:
        lo = hi = base
        where = f"baseline {base:.4f}"
    out = band_distance(loss, (lo, hi)) if math.isfinite(loss) else math.inf
    evidence = {"final_eval_loss": loss, "baseline_final_eval_loss": base, "delta": loss - base,
                "band": {"low": lo, "high": hi, "excess": list(inp.baseline_band), "width": hi - lo},
                "outside_band": out, "tolerance": tol,
                "loss_floor": floor, "gap_to_floor": loss - floor, "baseline_gap_to_floor": base - floor}
    if not math.isfinite(loss) or abs(out) > tol:
        return Verdict("parity", "fail", f"final eval loss {loss:.4f} vs {where}: outside by {out:+.4f} "
                                         f"(tolerance ±{tol})", evidence)
    inside = "inside it" if out == 0 else f"{out:+.4f} outside"
    return Verdict("parity", "pass", f"final eval loss {loss:.4f} vs {where}: {inside} (tolerance ±{tol}; "
                                     f"same-seed baseline {base:.4f})", evidence)
