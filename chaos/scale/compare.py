"""One plan, every way to train it: data-parallel (non-elastic and elastic), synchronous and Decoupled DiLoCo.

What a planner asks first: on my chips, failure rate and links, what goodput
and wall-clock does each approach give? :func:`variants` derives the four
plans from one (same hardware, failures, links and seed; M and the schedule
from the plan's ``algorithm`` section, M = 8 when the plan is data-parallel;
data-parallel over heterogeneous learners steps at the slowest one's pace),
:func:`results_table` lays the results side by side.

Example:
    >>> from chaos.scale.config import build_scale_config
    >>> cfg = build_scale_config({"algorithm": {"mode": "decoupled", "num_learners": 8}})
    >>> [(v.algorithm.mode, v.elastic, v.algorithm.num_learners) for v in variants(cfg)]
    [('data-parallel', False, 1), ('data-parallel', True, 1), ('sync-diloco', True, 8), ('decoupled', True, 8)]
"""

from __future__ import annotations

from collections.abc import Sequence

from chaos.formatting import markdown_table
from chaos.scale.config import ScaleConfig, build_scale_config
from chaos.scale.quantities import format_count, format_duration
from chaos.scale.result import ScaleResult

# Fields that only make sense for one mode; dropped when the plan is turned into another mode.
_MODE_BOUND = (
    "min_quorum",
    "grace",
    "staggered",
    "overlap_steps",
    "blocking",
    "max_staleness",
    "outer_lr",
    "outer_momentum",
    "merge_rule",
    "rounds",
    "outer_gradient",
    "late_uploads",
)


def variants(cfg: ScaleConfig) -> list[ScaleConfig]:
    """Data-parallel without and with elasticity, sync DiLoCo and Decoupled DiLoCo, from one plan."""
    tree = cfg.model_dump(mode="json")
    alg = {k: v for k, v in tree["algorithm"].items() if k not in _MODE_BOUND}
    m = alg.pop("num_learners")
    m = m if cfg.algorithm.mode != "data-parallel" else 8
    dp_alg = {k: v for k, v in alg.items() if k != "sync_every"}
    out = []
    for mode, elastic, extra in (
        ("data-parallel", False, {"num_learners": 1}),
        ("data-parallel", True, {"num_learners": 1}),
        ("sync-diloco", cfg.elastic, {"num_learners": m}),
        ("decoupled", cfg.elastic, {"num_learners": m}),
    ):
        a = {**(dp_alg if mode == "data-parallel" else alg), **extra, "mode": mode}
        t = {**tree, "elastic": elastic, "algorithm": a}
        if mode == "data-parallel":
            # One job: a scheduled failure of any learner hits it, and it steps as fast as its slowest chips.
            t["failures"] = {
                **tree["failures"],
                "schedule": [{**f, "learner": 0} for f in tree["failures"]["schedule"]],
            }
            slowest = max([cfg.workload.step_s, *cfg.workload.step_s_overrides.values()])
            t["workload"] = {**tree["workload"], "step_s": slowest, "step_s_overrides": {}}
        out.append(build_scale_config(t, f"{cfg.name} as {mode}"))
    return out


def results_table(results: Sequence[ScaleResult]) -> str:
    """A Markdown table of results, one row each."""
    header = (
        "approach",
        "goodput",
        "merged goodput",
        "longest global stall",
        "time to budget",
        "failures",
        "tokens merged",
    )
    return markdown_table(
        header,
        [
            (
                r.label,
                f"{r.goodput:.1%}",
                f"{r.merged_goodput:.1%}",
                format_duration(r.longest_stall_s),
                "—" if r.time_to_budget_s is None else format_duration(r.time_to_budget_s),
                r.failures,
                format_count(r.merged_tokens),
            )
            for r in results
        ],
    )


def sweep_table(field: str, values: Sequence[str], grid: Sequence[Sequence[ScaleResult]]) -> str:
    """Goodput (merged goodput where it is lower; time to budget when one is set) per approach and swept value."""
    rows = []
    for j, first in enumerate(grid[0]):
        cells = []
        for results in grid:
            r = results[j]
            budget = "" if r.time_to_budget_s is None else f", {format_duration(r.time_to_budget_s)}"
            merged = f" (merged {r.merged_goodput:.1%})" if r.goodput - r.merged_goodput > 0.005 else ""
            cells.append(f"{r.goodput:.1%}{merged}{budget}")
        rows.append([first.label, *cells])
    return markdown_table(["approach", *[f"{field}={v}" for v in values]], rows)
