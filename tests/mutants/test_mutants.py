"""The mutant suite, per change: every planted defect is caught by some check, and the unmutated runs all pass.

Each mutant (tests/mutants/registry.py) runs in deterministic mode on its first scenario, the one that reaches it
best (``python -m tests.mutants`` runs every scenario of every mutant, and more seeds); its run must differ from the
unmutated one (a mutant that changes nothing proves nothing) and some check must FAIL, except for the two lists below,
each of which is held to what it claims in both directions (a listed mutant that is caught fails the test: take it
off the list). The mutants whose first scenario is a round-level one (the merge's inputs: weights, rebase, quorum,
grace, late uploads, wake-up) run in test_mutants_rounds.py, the others here: two modules, so that the per-change
tier's two workers (``--dist loadfile``) share them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chaos.checkers import CHECKERS
from tests.mutants import render
from tests.mutants.registry import MECHANISMS, MUTANTS, MUTANTS_BY_NAME, Mutant, ScenarioRef
from tests.mutants.runner import RESULTS_PATH, Cell, run_cell

pytestmark = pytest.mark.chaos_simulation

ROOT = Path(__file__).resolve().parents[2]

# Mutants no check catches without the merge audit (a check named "audit" that recomputes every merge, restore and
# learner-held value from the recorded inputs with an independent numpy reference; issue 38). Until CHECKERS has
# "audit", each must survive every other check (else it does not belong here); once it has, the audit must catch it.
AWAITING_AUDIT: dict[str, str] = {
    # outer optimizer state: the merge's momentum is not the one the previous merge left
    "momentum_reset": "the parameters still improve; only recomputing the outer step shows the lost momentum",
    # restore of optimizer state: the restored momentum is not the checkpoint's
    "momentum_not_restored": "one restore's worth of momentum: invisible in loss, liveness or versions",
    # merge arithmetic: a contribution listed as a participant but missing from the merged update
    "contribution_dropped": "safety sees every participant backed by an accepted upload; the update is short by one",
    # merge arithmetic: mean for RDA
    "rule_ignored": "a plausible update either way; only the reference merge tells the rules apart",
    # weights: c_tokens²/c_steps dropped, or paired with the wrong contribution
    "uniform_weights": "the weights differ only where counters differ (stragglers, rejoiners): a small bias",
    "weights_misaligned": "as above: a small bias, visible only against the reference weights",
    # rebase: an update against an older base applied to the newer value as is
    "no_rebase": "rare (bases one version old) and small: only the reference rebase shows it",
    # restore, which checkpoint: one interval older than the newest, versions skipped for one interval only
    "restore_older_checkpoint": "durability allows one interval lost (10 merges) and versions still rise; the audit "
                                "compares the restored state with the newest checkpoint's digests",
}

# Findings: mutants outside the audit's reach that no check catches today (issue 38, item 7's report). Each stays an
# expected failure here, strictly: when a check learns to catch it, the test fails until it is taken off this list.
FINDINGS: dict[str, str] = {
    "grace_ignored": "no check reads how many learners each merge took (chaos.regime only warns in the report)",
    "quorum_off_by_one": "partition-majority's stall (8 s) is shorter than liveness's bound (25 rounds = 16 s); a "
                         "20 s partition is caught by liveness",
    "merge_before_opening": "no check compares a merge's time with its round's opening (the merge event's wait_s "
                            "goes negative)",
    "late_accepted": "no check compares late uploads (upload.late, merge.late) with algorithm.late_uploads: refuse",
    "wake_missing": "merges halve and compute goodput falls from 74% to 21%, but goodput's floor is 10%, liveness's "
                    "bound doubles with the run's own round time, and parity's ±0.05 is 5× the surrogate's whole "
                    "excess over its floor (the mutant's baseline is slowed as much)",
    "restore_no_version_skip": "this crash lost no merge (the restore's checkpoint was the last state), so no "
                               "version regressed; the learner waiting for the lost version of fragment 2 never "
                               "syncs it again (v12 to the end, the others v88), and liveness counts merges of any "
                               "fragment",
    "restore_clock_lost": "150 uploads refused as late and a 9.2 s gap while reachable, under liveness's 16 s bound",
    "restore_ledger_lost": "no check balances the token ledger: the run trains past its budget (382 merges, 378 "
                           "unmutated)",
    "rejoin_from_init": "the state fetch's digest is taken before the learner swaps in its initial weights; "
                        "overwrite-on-receipt heals it within a round per fragment",
    "data_replayed": "no check balances data positions per incarnation (a replayed stream is still a stream)",
}

# The first scenarios that make a mutant a round-level one (test_mutants_rounds.py runs those).
ROUND_SCENARIOS = frozenset({"straggler", "latency-jitter", "partition-majority", "partition-one", "throttle-all"})


def runs_here(m: Mutant, rounds: bool) -> bool:
    return (m.scenarios[0].label in ROUND_SCENARIOS) == rounds


# One process's runs, shared by the tests of a module (xdist keeps a module on one worker).
_UNMUTATED: dict[str, Cell] = {}
_MUTATED: dict[str, Cell] = {}


def unmutated(ref: ScenarioRef) -> Cell:
    if ref.label not in _UNMUTATED:
        _UNMUTATED[ref.label] = run_cell(None, ref)
    return _UNMUTATED[ref.label]


def mutated(m: Mutant) -> Cell:
    if m.name not in _MUTATED:
        cell = run_cell(m, m.scenarios[0])
        cell.changed = cell.history_sha != unmutated(m.scenarios[0]).history_sha
        _MUTATED[m.name] = cell
    return _MUTATED[m.name]


def judge(name: str) -> None:
    """The test of one mutant (both modules call it)."""
    m = MUTANTS_BY_NAME[name]
    base = unmutated(m.scenarios[0])
    assert base.status == "pass", f"unmutated {base.scenario}: {base.summaries}"
    cell = mutated(m)
    assert cell.changed, f"{name} changed nothing on {cell.scenario}: it proves nothing there"
    caught_by = cell.failed
    said = "; ".join(f"{k}: {cell.summaries[k]}" for k in caught_by)
    if name in AWAITING_AUDIT:
        others = [k for k in caught_by if k != "audit"]
        assert not others, f"{name} is caught without the audit ({said}): take it off AWAITING_AUDIT"
        if "audit" in CHECKERS:
            assert "audit" in caught_by, f"the merge audit does not catch {name} on {cell.scenario}"
        return
    if name in FINDINGS:
        assert not caught_by, f"{name} is caught now ({said}): take it off FINDINGS"
        pytest.xfail(f"finding: {name} survives every check on {cell.scenario}: {FINDINGS[name]}")
    assert caught_by, f"{name} survives every check on {cell.scenario}: {cell.verdicts}"


@pytest.mark.parametrize("name", [m.name for m in MUTANTS if runs_here(m, rounds=False)])
def test_mutant_is_caught(name: str) -> None:
    judge(name)


def test_a_mutant_run_replays_bit_for_bit() -> None:
    """Every random choice comes from the scenario's seeds: a mutant's run twice is the same history."""
    m = MUTANTS_BY_NAME["nan_guard_off"]  # the cheapest run
    assert run_cell(m, m.scenarios[0]).history_sha == mutated(m).history_sha


def test_every_mechanism_has_a_mutant_and_every_list_names_real_ones() -> None:
    assert {m.mechanism for m in MUTANTS} == set(MECHANISMS)
    assert not (set(AWAITING_AUDIT) | set(FINDINGS)) - set(MUTANTS_BY_NAME)
    assert not set(AWAITING_AUDIT) & set(FINDINGS)
    for m in MUTANTS:
        for ref in m.scenarios:
            ref.load()  # every scenario (and override) is valid


def test_no_package_module_can_reach_the_mutants() -> None:
    """Test machinery only: no module of the installed packages imports tests.mutants (read with ast)."""
    reaching = []
    for pkg in ("trainer", "faults", "chaos", "benchmarks"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n == "tests" or n.startswith("tests.") for n in names):
                    reaching.append(str(path.relative_to(ROOT)))
    assert not reaching, f"{sorted(set(reaching))} import the tests package"


def test_the_docs_show_the_recorded_matrix_of_every_mutant() -> None:
    """docs/scenarios-and-checks.md holds what benchmarks/results/mutants.json renders to, and that file has a row
    for every mutant of the registry (re-run ``python -m tests.mutants --render`` after changing the registry)."""
    import json

    doc = json.loads((ROOT / RESULTS_PATH).read_text())
    recorded = {m["name"] for m in doc["results"]["mutants"]}
    assert recorded == set(MUTANTS_BY_NAME), f"mutants.json is stale: {sorted(recorded ^ set(MUTANTS_BY_NAME))}"
    text = (ROOT / render.DOC).read_text()
    assert render.rendered(text, doc) == text, "docs/scenarios-and-checks.md is stale: python -m tests.mutants.render"
