"""Parity: the chaos run's final eval loss is within the tolerance of the fault-free baseline's."""

from __future__ import annotations

import math

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev


def check_parity(inp: CheckInput) -> Verdict:
    tol = inp.checks.parity.tolerance
    finals = [e for e in inp.history.of(ev.Eval) if e.final]
    if not finals:
        return Verdict("parity", "indeterminate", "the run has no final evaluation (it did not reach its budget)")
    if inp.baseline_final_loss is None or not math.isfinite(inp.baseline_final_loss):
        return Verdict("parity", "indeterminate", "no fault-free baseline to compare with")
    loss, base = finals[-1].loss, inp.baseline_final_loss
    floor = finals[-1].loss_floor
    delta = loss - base
    evidence = {"final_eval_loss": loss, "baseline_final_eval_loss": base, "delta": delta, "tolerance": tol,
                "loss_floor": floor, "gap_to_floor": loss - floor, "baseline_gap_to_floor": base - floor}
    if not math.isfinite(loss) or abs(delta) > tol:
        return Verdict("parity", "fail", f"final eval loss {loss:.4f} vs baseline {base:.4f}: off by {delta:+.4f} "
                                         f"(tolerance ±{tol})", evidence)
    return Verdict("parity", "pass", f"final eval loss {loss:.4f} vs baseline {base:.4f} ({delta:+.4f}, "
                                     f"tolerance ±{tol}; floor {floor:.4f})", evidence)
