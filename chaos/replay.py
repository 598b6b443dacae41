"""Replay: rebuild the exact scenario of an earlier run (or a shrunk repro file) to run it again.

A run directory holds ``scenario.json`` and, in ``controller.jsonl``, the
concrete plan it executed (random draws resolved). Replaying a run directory
runs that plan as a fixed schedule, so it is the same faults on the same
targets at the same times even if the schedule generator has changed since.

Example:
    scenario = replay_scenario("runs/chaos/random-mix-20261130-101500")
    scenario = replay_scenario("repro.yaml")       # a file written by `diloco-chaos search`
"""

from __future__ import annotations

import json
from pathlib import Path

from chaos.errors import ScenarioError
from chaos.history import PlannedFault, PlanRecord, parse_record
from chaos.scenario import Scenario, load_scenario, parse_scenario, resolve
from faults.kinds import syncer_only
from trainer.events import jsonl_lines


def _spec(fault: PlannedFault) -> dict[str, object]:
    """A planned fault as the scenario file's fault spec (its tree: the scenario parser validates it)."""
    out: dict[str, object] = {
        "fault": fault.kind,
        "id": fault.fault_id,
        "duration": fault.duration,
        **fault.params,
    }
    if not syncer_only(fault.kind):
        out["targets"] = list(fault.targets)
    if fault.at_merge is not None:
        out["at_merge"] = fault.at_merge
    else:
        out["at"] = fault.at
    return out


def scenario_from_run(run_dir: str | Path) -> Scenario:
    """The scenario of a run directory with its recorded plan as a fixed schedule."""
    run_dir = Path(run_dir)
    spath, cpath = run_dir / "scenario.json", run_dir / "controller.jsonl"
    if not spath.exists() or not cpath.exists():
        raise ScenarioError(f"{run_dir}: not a run directory (needs scenario.json and controller.jsonl)")
    tree = json.loads(spath.read_text())
    plan = next(
        (r for r in (parse_record(line) for line in jsonl_lines(cpath.read_text())) if isinstance(r, PlanRecord)),
        None,
    )
    if plan is None:
        raise ScenarioError(f"{cpath}: no plan record; the run stopped before its schedule was written")
    tree["schedule"] = [_spec(f) for f in plan.faults]
    tree.pop("random", None)
    return parse_scenario(tree, f"{run_dir} (recorded plan)")


def replay_scenario(target: str | Path) -> Scenario:
    """A run directory's recorded scenario, or a scenario file / built-in name."""
    p = Path(target)
    if p.is_dir():
        return scenario_from_run(p)
    return load_scenario(resolve(str(target)))
