"""Nightly: the mutant suite on real processes — each real-mode mutant in the syncer and learners of a real run.

Per change the mutants run in deterministic mode's one process (tests/mutants/test_mutants*.py). Here each mutant
whose modes include ``real`` (tests/mutants/registry.py: the gRPC shells' own defects, and the core's that act only
on a fault's path) runs in the real processes of its first scenario (local processes, the real Toxiproxy, gRPC,
JAX), injected by tests/mutants/real.py's start-up hook. Each test runs the scenario twice, unmutated and mutated,
and fails unless

- the hook was applied in the syncer and in the learners, and the mutated code was called in some child (a mutant
  that is never reached proves nothing);
- the mutated run judged its parity against the unmutated fault-free baselines, read from the cache (every real
  mutant is ``fault_free_unchanged``: the baselines are computed first, without it, and shared);
- some check FAILs on the mutated run that passed on the unmutated one (the mutant changed the verdict; a check
  failing on both says nothing about the mutant).

Two a night in turn (``chaos_rotate``): the test ids start with the scenario, so a night's pair mostly shares its
scenario, its baselines and its unmutated run (one process's cache below; ``--dist loadfile`` keeps a module on one
worker).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.mutants.real import in_children, records
from tests.mutants.registry import REAL_MUTANTS, Mutant

# Measured 2026-12-04 (2-core VM, a unit-test run beside it): one member, baselines cold, 4.8 min (3 fault-free runs,
# the unmutated and the mutated run, ~1 min each); a night's pair at most 2 more runs.
pytestmark = pytest.mark.chaos_nightly(minutes=9)


def member_id(m: Mutant) -> str:
    """``<first scenario>--<mutant>``: sorted ids (the rotation's order) put a scenario's mutants side by side.

    >>> from tests.mutants.registry import MUTANTS_BY_NAME
    >>> member_id(MUTANTS_BY_NAME["restore_ledger_lost"])
    'syncer-crash-after-kill--restore_ledger_lost'
    """
    return re.sub(r"[^a-z0-9]+", "-", m.scenarios[0].label.lower()).strip("-") + "--" + m.name


MEMBERS = sorted(REAL_MUTANTS, key=member_id)

# The unmutated run of each scenario, by its label: the verdicts of one process's runs (a night's pair shares it).
_UNMUTATED: dict[str, dict[str, str]] = {}


def verdicts(result: Any) -> dict[str, str]:
    return {v.name: v.status for v in result.verdicts}


def unmutated(m: Mutant, run_chaos: Any) -> dict[str, str]:
    """The first scenario of ``m`` run without a mutant (its fault-free baselines computed here, unmutated, into the
    session's cache when not there yet)."""
    ref = m.scenarios[0]
    if ref.label not in _UNMUTATED:
        _UNMUTATED[ref.label] = verdicts(run_chaos(ref.load()))
    return _UNMUTATED[ref.label]


@pytest.mark.chaos
@pytest.mark.timeout(3600)
@pytest.mark.chaos_rotate(per_night=2)
@pytest.mark.parametrize("name", [m.name for m in MEMBERS], ids=[member_id(m) for m in MEMBERS])
def test_real_mutant_is_caught(name: str, run_chaos: Any, chaos_run_dir: Path) -> None:
    m = next(x for x in MEMBERS if x.name == name)
    base = unmutated(m, run_chaos)  # first: the baselines it computes must not run the mutant
    log = chaos_run_dir / f"{name}.mutant.jsonl"
    with in_children(name, log):
        result = run_chaos(m.scenarios[0].load())
    got = verdicts(result)
    recs = records(log)
    applied = {r["unit"] for r in recs if r["event"] == "applied"}
    called = sorted({r["target"] for r in recs if r["event"] == "called"})
    said = "; ".join(f"{v.name} {v.status}: {v.summary}" for v in result.verdicts if v.status != "pass")
    print(
        f"{name} on {m.scenarios[0].label}: applied in {sorted(applied)}, called {called}; unmutated {base}; "
        f"mutated {got}; {said}"
    )
    assert not [r for r in recs if r["event"] == "refused"], recs
    assert "syncer" in applied and any(u.startswith("learner") for u in applied), (
        f"the hook did not reach every kind of unit: applied in {sorted(applied)} ({log})"
    )
    assert called, f"{name}: its mutated code never ran in any process of {m.scenarios[0].label} ({log})"
    teardown = result.report.teardown
    assert teardown.processes_left == [] and teardown.proxies_left == []
    baseline = result.report.baseline
    if baseline is not None:  # parity on: the band came from the cache the unmutated run filled
        assert all(b.cached for b in [baseline, *baseline.runs]), (
            "the mutated run computed a fault-free baseline (with the mutant in force)"
        )
    caught = [c for c, s in got.items() if s == "fail"]
    assert caught, f"{name} survives every check on real processes ({m.scenarios[0].label}): {got}"
    changed = [c for c in caught if base.get(c) == "pass"]
    assert changed, (
        f"{name}: every check it fails ({caught}) failed on the unmutated run too ({base}): "
        "the mutant changed no verdict"
    )
