"""Run mutants in deterministic mode and record which checks catch each: the catch matrix.

A *cell* is one (mutant or the unmutated trainer, scenario, seed) run: every check's verdict, and whether the
mutant changed the run at all (its history against the unmutated run's, bit for bit — deterministic mode replays
exactly, so any difference is the mutant's). A mutant is *caught* when some check FAILs on one of its cells.

``.venv/bin/python -m tests.mutants`` runs the whole matrix (:mod:`tests.mutants.__main__`); the per-change tier
(``tests/mutants/test_mutants*.py``) runs each mutant on its first scenario. Deterministic mode only: the mutants of
:data:`~tests.mutants.registry.SIM_MUTANTS` (real-process ones run nightly, :mod:`tests.mutants.real`).

Example (a matrix cell over seeds):
    >>> _mark(["pass", "pass"]), _mark(["fail", "fail"]), _mark(["pass", "fail"]), _mark([])
    ('.', 'FAIL', 'FAIL 1/2', '—')
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC
from typing import Any

from chaos.checkers import CHECKERS
from chaos.sim import SimOptions, simulate
from tests.mutants.registry import SIM_MUTANTS, Mutant, ScenarioRef
from trainer import events as ev

UNMUTATED = "(unmutated)"


def sim_options(step_delay_s: float) -> SimOptions:
    """The options tests/property/test_scenarios_deterministic.py runs the built-ins with: each learner's step takes
    the simulator's compute time plus the scenario's emulated accelerator delay."""
    return SimOptions(step_time_s=SimOptions().step_time_s + step_delay_s)


@dataclass
class Cell:
    """One run: the mutant (or :data:`UNMUTATED`), the scenario, its seed, and what the checks said."""

    mutant: str
    scenario: str
    seed: int
    status: str  # the run's overall status: pass, fail, indeterminate, timeout
    verdicts: dict[str, str]  # check -> pass / fail / indeterminate (only the checks the scenario enables)
    summaries: dict[str, str]  # check -> summary, for the checks that did not pass
    history_sha: str
    final_loss: float | None
    merges: int
    wall_s: float
    changed: bool | None = None  # the history differs from the unmutated run's (None: not compared)

    @property
    def failed(self) -> list[str]:
        return [name for name, status in self.verdicts.items() if status == "fail"]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_cell(mutant: Mutant | None, ref: ScenarioRef, seed: int = 0) -> Cell:
    """Simulate ``ref`` (at ``seed``) with ``mutant`` in force (None: the trainer as it is) and judge it."""
    s = ref.load(seed)
    t0 = time.perf_counter()
    if mutant is None:
        r = simulate(s, sim_options(s.cluster.learner.step_delay_s))
    else:
        with mutant.applied():
            r = simulate(s, sim_options(s.cluster.learner.step_delay_s))
    wall = time.perf_counter() - t0
    return Cell(
        mutant.name if mutant else UNMUTATED,
        ref.label,
        seed,
        r.status,
        {v.name: v.status for v in r.verdicts},
        {v.name: v.summary for v in r.verdicts if v.status != "pass"},
        hashlib.sha256(r.history_json().encode()).hexdigest(),
        r.final_loss,
        len(r.history.of(ev.Merge)),
        round(wall, 3),
    )


def fault_free_unchanged(mutant: Mutant, ref: ScenarioRef, seed: int = 0) -> bool:
    """Whether ``mutant`` leaves ``ref``'s same-seed fault-free run (parity's baseline) exactly as it is: its final
    loss and excess over the floor, bit for bit (deterministic mode is exact, so any effect shows). What a mutant
    claims with ``fault_free_unchanged`` before its runs share the unmutated baselines."""
    import chaos.sim.runner as sim_runner

    s = ref.load(seed)
    opts = sim_options(s.cluster.learner.step_delay_s)
    clean = sim_runner._fault_free(s, opts, s.cluster.seed)
    with mutant.applied(share_baselines=False):
        mutated = sim_runner._fault_free(s, opts, s.cluster.seed)
    return clean == mutated


def scenario_refs(mutants: Iterable[Mutant]) -> list[ScenarioRef]:
    """Every scenario the mutants reach, each once, in first-seen order."""
    seen: dict[str, ScenarioRef] = {}
    for m in mutants:
        for ref in m.scenarios:
            seen.setdefault(ref.label, ref)
    return list(seen.values())


@dataclass
class MutantResult:
    mutant: Mutant
    cells: list[Cell]
    fault_free_verified: bool | None = None  # its fault_free_unchanged claim checked (None: it makes none)

    @property
    def caught_by(self) -> list[str]:
        """The checks that FAILed on any of its cells, in the checkers' order."""
        failed = {c for cell in self.cells for c in cell.failed}
        return [c for c in CHECKERS if c in failed]

    @property
    def caught(self) -> bool:
        return bool(self.caught_by)

    @property
    def changed(self) -> bool:
        return any(c.changed for c in self.cells)


def run_mutant(mutant: Mutant, seeds: Sequence[int], unmutated: dict[tuple[str, int], Cell]) -> MutantResult:
    """Every scenario of ``mutant`` at every seed, each compared with its unmutated run (which must be there)."""
    cells = []
    for ref in mutant.scenarios:
        for seed in seeds:
            cell = run_cell(mutant, ref, seed)
            base = unmutated.get((ref.label, seed))
            cell.changed = None if base is None else cell.history_sha != base.history_sha
            cells.append(cell)
    verified = fault_free_unchanged(mutant, mutant.scenarios[0]) if mutant.fault_free_unchanged else None
    return MutantResult(mutant, cells, verified)


def run_unmutated(refs: Iterable[ScenarioRef], seeds: Sequence[int]) -> dict[tuple[str, int], Cell]:
    return {(ref.label, seed): run_cell(None, ref, seed) for ref in refs for seed in seeds}


@dataclass
class Matrix:
    """The whole catch matrix: the unmutated runs and each mutant's."""

    seeds: list[int]
    unmutated: dict[tuple[str, int], Cell]
    results: list[MutantResult] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def checks(self) -> list[str]:
        return list(CHECKERS)

    @property
    def survivors(self) -> list[str]:
        return [r.mutant.name for r in self.results if not r.caught]

    def to_json(self) -> dict[str, Any]:
        return {
            "checks": self.checks,
            "seeds": self.seeds,
            "unmutated": [c.to_json() for c in self.unmutated.values()],
            "mutants": [
                {
                    "name": r.mutant.name,
                    "mechanism": r.mutant.mechanism,
                    "description": r.mutant.description,
                    "scenarios": [s.label for s in r.mutant.scenarios],
                    "patches": [p.target for p in r.mutant.patches],
                    "caught_by": r.caught_by,
                    "changed": r.changed,
                    "fault_free_unchanged": r.fault_free_verified,
                    "cells": [c.to_json() for c in r.cells],
                }
                for r in self.results
            ],
            "survivors": self.survivors,
            "wall_s": round(self.wall_s, 1),
        }


def run_matrix(
    mutants: Sequence[Mutant] = SIM_MUTANTS, seeds: Sequence[int] = (0,), progress: Any = None
) -> Matrix:
    """The unmutated runs of every scenario the mutants reach, then every mutant on its scenarios."""
    t0 = time.perf_counter()
    matrix = Matrix(list(seeds), run_unmutated(scenario_refs(mutants), seeds))
    for m in mutants:
        matrix.results.append(run_mutant(m, seeds, matrix.unmutated))
        if progress is not None:
            progress(matrix.results[-1])
    matrix.wall_s = time.perf_counter() - t0
    return matrix


# ---- the printed matrix ---------------------------------------------------------------------------------------------

SHORT = {"pass": ".", "fail": "FAIL", "indeterminate": "indet", "timeout": "timeout"}


def _mark(statuses: list[str]) -> str:
    """One matrix cell over seeds: '.' all passed, 'FAIL' (or 'FAIL 2/3') failed on some seeds, '—' not checked."""
    if not statuses:
        return "—"
    fails = statuses.count("fail")
    if fails:
        return "FAIL" if fails == len(statuses) else f"FAIL {fails}/{len(statuses)}"
    if "indeterminate" in statuses:
        return "indet"
    return "."


def rows(matrix: Matrix) -> list[list[str]]:
    """Mutant × scenario rows (the unmutated runs first), one column per check, then whether the mutant changed the
    run and the verdict on the mutant."""
    out = []
    by_scenario: dict[str, list[Cell]] = {}
    for c in matrix.unmutated.values():
        by_scenario.setdefault(c.scenario, []).append(c)
    for label, cells in by_scenario.items():
        out.append(
            [
                UNMUTATED,
                "—",
                label,
                *(_mark([c.verdicts[k] for c in cells if k in c.verdicts]) for k in matrix.checks),
                "—",
                "all pass" if all(c.status == "pass" for c in cells) else "NOT ALL PASS",
            ]
        )
    for r in matrix.results:
        per: dict[str, list[Cell]] = {}
        for c in r.cells:
            per.setdefault(c.scenario, []).append(c)
        for label, cells in per.items():
            caught = sorted({k for c in cells for k in c.failed}, key=matrix.checks.index)
            out.append(
                [
                    r.mutant.name,
                    r.mutant.mechanism,
                    label,
                    *(_mark([c.verdicts[k] for c in cells if k in c.verdicts]) for k in matrix.checks),
                    "yes" if any(c.changed for c in cells) else "NO",
                    (f"caught ({', '.join(caught)})" if caught else "survives")
                    + (" (timed out)" if any(c.status == "timeout" for c in cells) else ""),
                ]
            )
    return out


def header(matrix: Matrix) -> list[str]:
    return ["mutant", "mechanism", "scenario", *matrix.checks, "changed", "verdict"]


def text_table(matrix: Matrix) -> str:
    """The matrix as aligned text, for a terminal."""
    table = [header(matrix), *rows(matrix)]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(matrix: Matrix) -> str:
    caught = [r for r in matrix.results if r.caught]
    clean = all(c.status == "pass" for c in matrix.unmutated.values())
    lines = [
        f"{len(caught)} of {len(matrix.results)} mutants caught; "
        f"unmutated runs: {'all pass' if clean else 'NOT all pass'}"
    ]
    for r in matrix.results:
        if r.fault_free_verified is False:
            lines.append(
                f"  WRONG CLAIM: {r.mutant.name} changes the fault-free run (fault_free_unchanged=True): "
                "its runs were judged against the unmutated baselines"
            )
        if not r.caught:
            lines.append(
                f"  survives: {r.mutant.name} ({r.mutant.mechanism})"
                + ("" if r.changed else " — it changed no run!")
            )
    return "\n".join(lines)


# ---- the results file ------------------------------------------------------------------------------------------------

RESULTS_PATH = "benchmarks/results/mutants.json"


def git_state() -> dict[str, Any]:
    """The commit the matrix was measured at, and the package files that differed from it (a shared checkout)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return ""

    changed = [
        line[3:]
        for line in git("status", "--porcelain", "--", "trainer", "chaos", "faults", "tests/mutants").splitlines()
        if line.strip()
    ]
    return {"commit": git("rev-parse", "HEAD").strip(), "uncommitted": changed}


def results_doc(matrix: Matrix, command: str) -> dict[str, Any]:
    """``benchmarks/results/mutants.json``: the command, commit, machine and options, then every cell's verdicts."""
    from datetime import datetime

    from benchmarks.common import machine

    return {
        "benchmark": "mutants",
        "command": command,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {
            "seeds": matrix.seeds,
            "git": git_state(),
            "mode": "deterministic (chaos.sim)",
            "sim_options": "SimOptions(step_time_s=SimOptions().step_time_s + learner.step_delay_s)",
            "baseline": "each mutant's fault-free baseline runs the mutant too (as a fresh real run's would)",
        },
        "results": matrix.to_json(),
        "table": text_table(matrix),
    }
