"""The scale simulator's plan: chips, failures, recovery, links and the algorithm, as one typed file.

The ``algorithm`` section *is* the trainer's :class:`~trainer.core.algorithm.Algorithm`
(same modes, presets and checks), so a plan names H, P, τ, K and the grace
window exactly as a run config does; only the defaults differ, to the paper's
scale (decoupled, M = 8, P = H = 24). Durations and counts take units
(``7d``, ``1y``, ``500ms``, ``2.4M``, ``12B``, ``5Gbps``).

The recovery defaults are this project's calibration against the paper's
goodput table (docs/scale-simulator.md): a failure costs a non-elastic job
``detect_s + restart_s`` = 74 s of global downtime (plus the step in flight) and an elastic one
``detect_s + reconfigure_s`` = 22 s; the paper's own text puts these at
60–85 s and 20–30 s.

Example:
    >>> cfg = build_scale_config({"cluster": {"chips": "2.4M"}, "algorithm": {"num_learners": 16}})
    >>> cfg.cluster.chips, cfg.chips_per_learner, cfg.duration / 86400, cfg.algorithm.sync_every
    (2400000.0, 150000.0, 7.0, 24)
    >>> build_scale_config({"cluster": {"chips": -1}}, "plan.yaml")
    Traceback (most recent call last):
    ...
    chaos.errors.ScenarioError: plan.yaml: invalid scale plan
      cluster.chips: Input should be greater than or equal to 1
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from chaos.errors import ScenarioError
from chaos.scale.quantities import DAY, YEAR, Count, Gbps, Seconds
from trainer.config import format_validation_error, merge_trees, parse_overrides
from trainer.core.algorithm import Algorithm
from trainer.errors import ConfigError

SCALE_ALGORITHM_DEFAULTS: dict[str, Any] = {"num_learners": 8, "num_fragments": 24, "sync_every": 24}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterSection(_Strict):
    chips: Count = Field(150_000, ge=1, description="accelerators allocated to the run, all learners together")
    chips_per_replica: Count = Field(
        1,
        ge=1,
        description="the slice an elastic job drops when one of its chips fails (one data-parallel replica)",
    )
    sites: int = Field(1, ge=1, description="datacentres; data-parallel all-reduces across them every step")


class WorkloadSection(_Strict):
    step_s: Seconds = Field(1.0, gt=0, description="compute time of one inner step")
    step_s_overrides: dict[int, Seconds] = Field(
        default_factory=dict, description="learner index -> its own step_s (heterogeneous hardware; same batch)"
    )
    tokens_per_step: Count = Field(4e6, gt=0, description="tokens all chips together train in one step")
    params: Count = Field(1e9, gt=0, description="model parameters")
    bytes_per_param: float = Field(2.0, gt=0, description="bytes per parameter on the wire (2: bf16, 0.5: 4-bit)")


class ScheduledFailure(_Strict):
    at: Seconds = Field(ge=0)
    learner: int = Field(ge=0, description="which learner (data-parallel: 0, the one job)")
    down_s: Seconds | None = Field(
        None,
        ge=0,
        description="out this long instead of detect_s + restart_s "
        "(elastic: + reconfigure_s), like a kill restarted "
        "after down_s",
    )


class FailureSection(_Strict):
    mtbi_per_chip: Seconds = Field(YEAR, ge=0, description="mean time between interruptions of one chip (0: none)")
    schedule: tuple[ScheduledFailure, ...] = Field(
        (), description="failures at fixed times, added to the random ones"
    )


class RecoverySection(_Strict):
    detect_s: Seconds = Field(10.0, ge=0, description="failure to detection (heartbeat timeout)")
    restart_s: Seconds = Field(
        61.0, ge=0, description="non-elastic: detection to training again (reschedule, restore)"
    )
    reconfigure_s: Seconds = Field(
        11.0, ge=0, description="elastic: detection to training again without the failed replica"
    )
    replace_s: Seconds = Field(
        0.0,
        ge=0,
        description="elastic: how long a failed replica stays out (0: hot spares fill it at the reconfiguration)",
    )
    rejoin_s: Seconds = Field(
        0.0,
        ge=0,
        description="a restarted learner: from its restart to its first useful "
        "step (fetch global parameters, compile)",
    )
    checkpoint_every_s: Seconds = Field(
        0.0, ge=0, description="non-elastic data-parallel: progress since the last checkpoint is lost (0: none is)"
    )


class NetworkSection(_Strict):
    bandwidth: Gbps = Field(
        0.0, ge=0, description="Gbit/s of each cross-site link, each learner's link to the syncer (0: unlimited)"
    )
    latency: Seconds = Field(0.0, ge=0, description="one-way latency of those links")
    dp_overlap: float = Field(
        0.0, ge=0, le=1, description="data-parallel: share of a step the all-reduce hides behind"
    )
    round_overhead_s: Seconds = Field(0.0, ge=0, description="fixed cost of each blocking sync (RPCs, merge)")


class ScaleConfig(_Strict):
    """A whole plan; see the field descriptions (``diloco-chaos simulate --scale --help``)."""

    name: str = "plan"
    seed: int = Field(0, ge=0, description="seed of the failure process")
    duration: Seconds = Field(
        7 * DAY, gt=0, description="simulated wall time (the run stops earlier at the budget)"
    )
    token_budget: Count = Field(
        0, ge=0, description="stop when this many tokens were merged (0: run the duration)"
    )
    budget_counts: Literal["merged", "trained"] = Field(
        "merged",
        description="what the budget counts: merged tokens (what reached the global model; the "
        "default) or trained ones (as the trainer's syncer counts them)",
    )
    elastic: bool = Field(True, description="data-parallel: elastic job; DiLoCo: each learner elastic inside")
    cluster: ClusterSection = ClusterSection()
    workload: WorkloadSection = WorkloadSection()
    failures: FailureSection = FailureSection()
    recovery: RecoverySection = RecoverySection()
    network: NetworkSection = NetworkSection()
    algorithm: Algorithm = Algorithm()

    @model_validator(mode="before")
    @classmethod
    def _scale_defaults(cls, data: Any) -> Any:
        # At scale the paper's shape is the sensible default (M = 8, P = H = 24), not the trainer's small-run
        # one; data-parallel is one job over every chip, so M = 1 is filled in rather than demanded.
        if not isinstance(data, dict):
            return data
        alg = data.get("algorithm", {})
        if not isinstance(alg, dict):
            return data
        if alg.get("mode") == "data-parallel":
            alg = {"num_learners": 1, **alg}
        else:
            alg = {**SCALE_ALGORITHM_DEFAULTS, **alg}
        return {**data, "algorithm": alg}

    @model_validator(mode="after")
    def _check(self) -> ScaleConfig:
        a = self.algorithm
        if a.mode == "data-parallel" and a.num_learners != 1:
            raise ValueError(
                "data-parallel is one job over all chips: set algorithm.num_learners = 1 "
                "(elasticity drops cluster.chips_per_replica chips at a time)"
            )
        if self.cluster.chips < a.num_learners:
            raise ValueError(
                f"{a.num_learners} learners need at least as many chips, got cluster.chips = "
                f"{self.cluster.chips:g}"
            )
        for i, s in self.workload.step_s_overrides.items():
            if not 0 <= i < a.num_learners or s <= 0:
                raise ValueError(
                    f"workload.step_s_overrides.{i} = {s}: needs a learner index 0..{a.num_learners - 1} "
                    "and a step time > 0"
                )
        if a.mode == "data-parallel" and self.workload.step_s_overrides:
            raise ValueError(
                "workload.step_s_overrides: data-parallel is one job stepping together; "
                "set workload.step_s instead"
            )
        for i, f in enumerate(self.failures.schedule):
            if f.learner >= a.num_learners:
                raise ValueError(
                    f"failures.schedule[{i}].learner = {f.learner}, but there are only "
                    f"{a.num_learners} learner(s) (0..{a.num_learners - 1})"
                )
        return self

    @property
    def chips_per_learner(self) -> float:
        return self.cluster.chips / self.algorithm.num_learners

    @property
    def model_bytes(self) -> float:
        return self.workload.params * self.workload.bytes_per_param

    def step_s(self, learner: int) -> float:
        """One learner's step time (its override, else ``workload.step_s``)."""
        return self.workload.step_s_overrides.get(learner, self.workload.step_s)

    @property
    def nominal_tokens_per_s(self) -> float:
        """What all learners together train per second when none ever waits, each at its own step time."""
        per_learner_step = self.workload.tokens_per_step / self.algorithm.num_learners
        return sum(per_learner_step / self.step_s(i) for i in range(self.algorithm.num_learners))


def build_scale_config(
    tree: dict[str, Any] | None = None, source: str = "<plan>", overrides: list[str] | None = None
) -> ScaleConfig:
    """Validate a plan tree (plus ``a.b=value`` overrides); errors name ``source`` and each bad field."""
    if tree is not None and not isinstance(tree, dict):
        raise ScenarioError(f"{source}: a scale plan must be a mapping of sections, got {type(tree).__name__}")
    try:
        merged = merge_trees(tree or {}, parse_overrides(overrides or []))
        return ScaleConfig.model_validate(merged)
    except ConfigError as err:
        raise ScenarioError(str(err)) from None
    except ValidationError as err:
        raise ScenarioError(format_validation_error(err, source, "scale plan", model=ScaleConfig)) from None


def load_scale_config(path: str | Path, overrides: list[str] | None = None) -> ScaleConfig:
    """Read a YAML plan file, or the JSON results file ``simulate --scale --json`` wrote (its plan, to replay)."""
    p = Path(path)
    try:
        tree = yaml.safe_load(p.read_text())
    except OSError as err:
        raise ScenarioError(f"{p}: cannot read the plan: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ScenarioError(f"{p}: not valid YAML: {err}") from None
    if isinstance(tree, dict) and set(tree) >= {"plan", "results"}:
        tree = tree["plan"]  # a results file: replay the plan it recorded, seed included
    return build_scale_config(tree, str(p), overrides)
