"""The mutant suite's round-level mutants (their first scenario is one of ROUND_SCENARIOS): the merge's inputs —
weights, rebase, quorum, grace, late uploads, wake-up. The lists and the judgement are test_mutants.py's; the two
modules only split the runs between the per-change tier's workers."""

from __future__ import annotations

import pytest

from tests.mutants.registry import SIM_MUTANTS
from tests.mutants.test_mutants import judge, runs_here

pytestmark = pytest.mark.chaos_simulation


@pytest.mark.parametrize("name", [m.name for m in SIM_MUTANTS if runs_here(m, rounds=True)])
def test_round_mutant_is_caught(name: str) -> None:
    judge(name)


def test_the_two_modules_run_every_mutant_once() -> None:
    here = {m.name for m in SIM_MUTANTS if runs_here(m, rounds=True)}
    there = {m.name for m in SIM_MUTANTS if runs_here(m, rounds=False)}
    assert here and there and not here & there and here | there == {m.name for m in SIM_MUTANTS}
