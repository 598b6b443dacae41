"""Whole-run re-execution (chaos.checkers.reexecution): from the config's initial parameters and the recorded uploads alone,
the numpy reference replays every merge and reaches the final checkpoint — through restores too — and says why when
it cannot run. (The defect only it catches, a syncer started from another initial state with records that agree, is
the mutant suite's syncer_init_drawn_apart.)"""

from __future__ import annotations

import functools

import pytest

from chaos.checkers.base import RunFacts
from chaos.checkers.reexecution import reexecute_run
from chaos.history import History
from chaos.scenario import scenario_with
from chaos.sim import SimOptions
from chaos.sim.runner import Simulation, plan


@functools.cache
def _run(name: str):
    """A simulated run of ``name`` (once a process: the tests only read it, copying what they change)."""
    s = scenario_with(name)
    sim = Simulation(s, SimOptions(baseline=False), plan(s))
    sim.run()
    h = History(sorted(sim.records, key=lambda r: r.ts), sorted(sim.events, key=lambda e: e.ts))
    assert sim.syncer.checkpoint is not None
    return s, sim, h


@pytest.mark.parametrize("name", ["syncer-crash", "kill-and-rejoin"])
def test_the_reexecution_reaches_the_final_checkpoint_through_restarts_and_restores(name: str) -> None:
    s, sim, h = _run(name)
    evidence, problems = reexecute_run(
        h, RunFacts.of(s).merge, sim.audit.files, sim.problem.init_params(), sim.syncer.checkpoint[0], 64.0
    )
    merges, error = evidence["merges"], evidence["error_roundoff_units"]
    assert not problems and evidence["ran"] and isinstance(merges, int) and merges > 200, evidence
    assert isinstance(error, float) and error < 16, (
        evidence
    )  # measured ~4: rounding to float32 keeps it from growing


def test_the_reexecution_says_why_it_cannot_run() -> None:
    s, sim, h = _run("kill-and-rejoin")
    facts, init, final = RunFacts.of(s).merge, sim.problem.init_params(), sim.syncer.checkpoint[0]
    one_lost = dict(sim.audit.files)
    one_lost.pop(next(iter(one_lost)))
    for files, initial, checkpoint, why in (
        (one_lost, init, final, "not every merge was kept whole"),
        (sim.audit.files, {}, final, "no initial parameters"),
        (sim.audit.files, init, {}, "no final checkpoint"),
    ):
        evidence, problems = reexecute_run(h, facts, files, initial, checkpoint, 64.0)
        said = evidence["why"]
        assert evidence == {"ran": False, "why": said} and isinstance(said, str) and why in said and not problems


def test_a_checkpoint_other_than_the_replayed_state_fails_naming_it() -> None:
    s, sim, h = _run("kill-and-rejoin")
    final = dict(sim.syncer.checkpoint[0])
    name = next(k for k in final if k.startswith("opt/"))  # the outer momentum of one tensor, damaged
    final[name] = final[name] * 0.5
    evidence, problems = reexecute_run(
        h, RunFacts.of(s).merge, sim.audit.files, sim.problem.init_params(), final, 64.0
    )
    assert problems and "does not reach the final checkpoint" in problems[0], evidence
