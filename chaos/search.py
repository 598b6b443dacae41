"""Search: generate fault schedules, find one that breaks a check, shrink it, write it as a scenario.

The search runs in deterministic mode (:mod:`chaos.sim`), where one run takes
seconds (about 2 s for kill-and-rejoin at 1.2M tokens), and lets Hypothesis shrink
the failing schedule to a minimal one (fewer, earlier, shorter faults on fewer learners). The result is
an ordinary scenario file: ``diloco-chaos replay FILE --backend local|docker``
runs it against real processes or containers.

Example:
    found = find_failure(load_scenario("my-template.yaml"), max_examples=200, seed=1)
    if found:
        print(found.schedule.describe(), [v.name for v in found.result.failed()])
        found.write("repro.yaml")
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample
from hypothesis.strategies import SearchStrategy

from chaos.scenario import Scenario
from chaos.sim import SimOptions, SimResult, simulate
from chaos.strategies import FaultSchedule, fault_schedules, outer_step_seconds, to_scenario

# Parity is left out by default: the simulator's surrogate loss is not the real model's.
DEFAULT_CHECKS: tuple[str, ...] = ("liveness", "reintegration", "durability", "safety")
# Every phase but `explain`: once an example fails, Hypothesis traces each later run and re-runs variations of the
# failing one for an explanation that `find` never prints; the planted-bug search took 3.1x as long with it
# (medians of 3 seeds, same shrunk schedule: `python -m benchmarks.costs.search_phases`).
SEARCH_PHASES: tuple[Phase, ...] = tuple(p for p in Phase if p is not Phase.explain)


@dataclass
class Found:
    """A minimal failing schedule, the scenario it became, and the simulated run that failed."""

    schedule: FaultSchedule
    scenario: Scenario
    result: SimResult
    checks: tuple[str, ...]
    seed: int
    examples_run: int
    opts: SimOptions = field(default_factory=SimOptions)

    def write(self, path: str | Path) -> Path:
        """Write the scenario, with a header saying how it was found and how to replay it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        failed = [f"{v.name}: {v.summary}" for v in self.result.failed(*self.checks)]
        header = [
            f"# Found by `diloco-chaos search` (seed {self.seed}, {self.examples_run} schedules simulated) and shrunk",
            f"# to {len(self.schedule)} fault(s): {self.schedule.describe()} (outer steps).",
            f"# Times are seconds after the first merge at {self.opts.step_time_s}s per inner step.",
            "# It failed in deterministic mode with:",
            *[f"#   {line}" for line in failed],
            "# Replay: diloco-chaos replay THIS_FILE --backend local|docker|sim",
        ]
        body = yaml.safe_dump(self.scenario.model_dump(mode="json", exclude_none=True), sort_keys=False)
        path.write_text("\n".join(header) + "\n" + body)
        return path


def find_failure(
    template: Scenario,
    *,
    schedules: SearchStrategy[FaultSchedule] | None = None,
    checks: tuple[str, ...] = DEFAULT_CHECKS,
    opts: SimOptions | None = None,
    max_examples: int = 200,
    seed: int = 0,
    on_example: Callable[[FaultSchedule, bool], None] | None = None,
) -> Found | None:
    """The minimal schedule (after shrinking) whose simulated run fails one of ``checks``; None if none failed.
    ``on_example(schedule, failed)`` hears of every schedule simulated (a search that ran nothing proves nothing)."""
    opts = opts or SimOptions()
    outer_s = outer_step_seconds(template, opts.step_time_s)
    strategy = (
        schedules
        if schedules is not None
        else fault_schedules(
            learners=template.cluster.algorithm.num_learners, min_quorum=template.cluster.algorithm.min_quorum
        )
    )
    count = [0]

    def fails(schedule: FaultSchedule) -> bool:
        count[0] += 1
        failed = bool(simulate(to_scenario(template, schedule, outer_s), opts).failed(*checks))
        if on_example is not None:
            on_example(schedule, failed)
        return failed

    try:
        minimal = find(
            strategy,
            fails,
            random=random.Random(seed),
            settings=settings(
                max_examples=max_examples,
                deadline=None,
                database=None,
                phases=SEARCH_PHASES,
                suppress_health_check=list(HealthCheck),
            ),
        )
    except NoSuchExample:
        return None
    scenario = to_scenario(
        template,
        minimal,
        outer_s,
        name=f"{template.name}-repro"[:60],
        description=f"Minimal failing schedule found by search from {template.name}: "
        f"{minimal.describe()} (outer steps)",
    )
    return Found(minimal, scenario, simulate(scenario, opts), checks, seed, count[0], opts)
