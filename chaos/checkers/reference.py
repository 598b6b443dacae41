"""Reference parity: the run's final eval loss is within the tolerance of synchronous DiLoCo's at equal tokens.

The paper claims Decoupled DiLoCo reaches the same model quality as synchronous training. The ``parity``
check compares a run with its own configuration's fault-free run, so a trainer that is not the paper's
algorithm passes it as long as it is consistently wrong; this check compares with the algorithm's reference,
the same cluster as synchronous DiLoCo (:meth:`trainer.config.RunConfig.sync_diloco_reference`), same seed,
model, data and token budget.

Example:
    >>> from chaos.history import History
    >>> from chaos.scenario import Checks
    >>> from chaos.checkers.base import CheckInput, RunFacts
    >>> from trainer import events as ev
    >>> final = ev.Eval(ts=1.0, source="syncer", merges_total=9, versions=[9], loss=2.43, loss_floor=2.39,
    ...                 tokens_total=100, final=True)
    >>> facts = RunFacts(("learner-0",), 1, 10)
    >>> check_reference(CheckInput(History([], [final]), facts, Checks(), None, reference_final_loss=2.42)).status
    'pass'
    >>> check_reference(CheckInput(History([], [final]), facts, Checks(), None, reference_final_loss=2.30)).status
    'fail'
"""

from __future__ import annotations

import math

from chaos.checkers.base import CheckInput, Verdict
from trainer import events as ev


def check_reference(inp: CheckInput) -> Verdict:
    tol = inp.checks.reference.tolerance
    finals = [e for e in inp.history.of(ev.Eval) if e.final]
    if not finals:
        return Verdict(
            "reference", "indeterminate", "the run has no final evaluation (it did not reach its budget)"
        )
    ref = inp.reference_final_loss
    if ref is None or not math.isfinite(ref):
        return Verdict("reference", "indeterminate", "no synchronous DiLoCo reference run to compare with")
    loss, floor = finals[-1].loss, finals[-1].loss_floor
    delta = loss - ref
    evidence = {
        "final_eval_loss": loss,
        "reference_final_eval_loss": ref,
        "delta": delta,
        "relative": delta / ref if ref else None,
        "tolerance": tol,
        "loss_floor": floor if math.isfinite(floor) else None,  # real text: not known
        **({"reference_gap_to_floor": ref - floor} if math.isfinite(floor) else {}),
    }
    if not math.isfinite(loss) or delta > tol:
        return Verdict(
            "reference",
            "fail",
            f"final eval loss {loss:.4f} vs synchronous DiLoCo {ref:.4f}: worse by {delta:+.4f} (tolerance {tol})",
            evidence,
        )
    return Verdict(
        "reference",
        "pass",
        f"final eval loss {loss:.4f} vs synchronous DiLoCo {ref:.4f} ({delta:+.4f}, tolerance {tol})",
        evidence,
    )
