"""Checkers: pure functions from a run's history to a verdict (pass / fail / indeterminate, with evidence).

Example:
    verdicts = run_checks(CheckInput(history, facts, scenario.checks, baseline_final_loss=2.71))
"""

from __future__ import annotations

from collections.abc import Callable

from chaos.checkers.audit import check_audit
from chaos.checkers.base import CheckInput, RunFacts, Verdict, overall
from chaos.checkers.durability import check_durability
from chaos.checkers.goodput import check_goodput
from chaos.checkers.ledger import check_ledger
from chaos.checkers.liveness import check_liveness
from chaos.checkers.parity import check_parity
from chaos.checkers.reference import check_reference
from chaos.checkers.reintegration import check_reintegration
from chaos.checkers.safety import check_safety
from chaos.sut import OURS, SystemUnderTest

CHECKERS: dict[str, Callable[[CheckInput], Verdict]] = {
    "liveness": check_liveness,
    "reintegration": check_reintegration,
    "parity": check_parity,
    "reference": check_reference,
    "durability": check_durability,
    "safety": check_safety,
    "goodput": check_goodput,
    "audit": check_audit,
    "ledger": check_ledger,
}


def run_checks(inp: CheckInput, sut: SystemUnderTest = OURS) -> list[Verdict]:
    """Every enabled check of the scenario, in a fixed order; liveness always for a run the progress watchdog
    ended (chaos.watchdog): a run that stopped training gets its verdict whatever the scenario switched off. A check
    whose evidence ``sut`` does not provide is not applicable, with the reasons (chaos.sut), not run."""
    stalled = inp.stalled is not None
    return [
        fn(inp) if not (lacks := sut.lacks(name)) else not_applicable(name, sut.name, lacks)
        for name, fn in CHECKERS.items()
        if getattr(inp.checks, name).enabled or (stalled and name == "liveness")
    ]


def not_applicable(check: str, sut: str, lacks: dict[str, str]) -> Verdict:
    """The verdict of a check ``sut`` cannot give its evidence: never a pass.

    >>> not_applicable("durability", "torchft", {"checkpoints": "none kept"}).summary
    'torchft does not provide checkpoints (none kept)'
    """
    why = "; ".join(f"{e} ({reason})" for e, reason in lacks.items())
    return Verdict(check, "not_applicable", f"{sut} does not provide {why}", {"lacks": dict(lacks)})


__all__ = ["CHECKERS", "CheckInput", "RunFacts", "Verdict", "not_applicable", "overall", "run_checks"]
