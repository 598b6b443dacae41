"""Declarative chaos scenarios: the cluster, a schedule of faults, and the checks with tolerances.

A scenario is a YAML file validated in full before anything starts; every
error names the file and the field (``schedule.1.duration``). Example::

    name: kill-one-learner
    description: SIGKILL one learner mid-run, restart it after 10 s.
    seed: 1                      # schedule randomness (targets: {random: n}, random:)
    cluster:                     # a trainer RunConfig (see trainer/config.py)
      token_budget: 400000
      algorithm: {mode: decoupled, num_learners: 3}
    schedule:
      - fault: kill
        targets: [learner-1]
        at: 5                    # seconds after the first merge (training under way)
        duration: 10             # then heal: restart it
    checks:
      parity: {tolerance: 0.15}

Times are measured from the first merge (``steady state``), not from process
start, so JIT compilation and start-up do not shift the schedule. ``at_merge``
triggers on the syncer's total merge count instead.

A fault entry is the fields every fault has (id, targets, at, at_merge,
duration, repeat, fault) plus its kind's own parameters, which its injector
declares (:mod:`faults.params`); each kind's entry class is built from the
kind table and the injectors when a scenario is validated, so there is no
per-kind code here (docs/scenarios-and-checks.md, "Adding a fault kind").

Why one module: it is the scenario file's whole schema, the one place a user's YAML is read against.
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_core import core_schema

from chaos.errors import ScenarioError
from faults.base import SYNCER
from faults.injectors import INJECTORS, params_of
from faults.kinds import FAULT_KINDS, KINDS, FaultKind
from trainer.config import (
    RunConfig,
    did_you_mean,
    format_validation_error,
    learner_ids,
    merge_trees,
    read_yaml_mapping,
)

__all__ = [
    "Scenario",
    "Checks",
    "Liveness",
    "Reintegration",
    "Parity",
    "Reference",
    "Durability",
    "Safety",
    "Goodput",
    "Audit",
    "Ledger",
    "RandomSchedule",
    "RandomTargets",
    "Repeat",
    "Targets",
    "FaultEntry",
    "entry_classes",
    "parse_scenario",
    "load_scenario",
    "builtin_scenarios",
    "scenario_with",
    "resolve",
    "BUILTIN_DIR",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no NaN or infinite numbers


class RandomTargets(_Strict):
    """``{random: n}``: n distinct learners drawn from the scenario's seeded generator."""

    random: int = Field(ge=1)


Targets = list[str] | Literal["all"] | RandomTargets


class Repeat(_Strict):
    """Repeat a fault ``count`` times, one start every ``every`` seconds (a flapping link)."""

    count: int = Field(ge=1, le=1000)
    every: float = Field(gt=0)


class _FaultSpec(_Strict):
    id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,40}$", description="default f<index>")
    targets: Targets = "all"
    at: float | None = Field(None, ge=0, description="seconds after the first merge")
    at_merge: int | None = Field(None, ge=0, description="when the syncer's total merge count reaches this")
    duration: float | None = Field(None, ge=0, description="seconds until heal")
    repeat: Repeat | None = None
    fault: str  # the kind; each kind's entry class narrows it to its name

    @model_validator(mode="after")
    def _timing(self) -> _FaultSpec:
        if self.at is not None and self.at_merge is not None:
            raise ValueError("give either 'at' (seconds) or 'at_merge' (merge count), not both")
        if self.repeat is not None and self.at_merge is not None:
            raise ValueError("'repeat' needs a start in seconds ('at'), not 'at_merge'")
        if self.repeat is not None and self.duration is not None and self.duration >= self.repeat.every:
            raise ValueError(
                f"duration ({self.duration}) must be shorter than repeat.every ({self.repeat.every}) "
                "or the repeats overlap"
            )
        return self


def _title(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


@functools.cache
def _entry_class(kind: FaultKind, injector: type) -> type[_FaultSpec]:
    """One kind's scenario entry: the common timing above, the kind's tag and its injector's ``Params``
    (:mod:`faults.params`), e.g. ``SlowSpec``: ``fraction`` and ``period_s``."""
    params = params_of(injector)
    clash = sorted(set(params.model_fields) & set(_FaultSpec.model_fields))
    if clash:
        raise TypeError(
            f"{injector.__name__}.Params: fields {clash} are every fault's timing and targets; rename them"
        )
    where = " Containers only (--backend docker)." if kind.containers else ""
    extra: dict[str, Any] = {"targets": (Targets, [SYNCER])} if kind.syncer_only else {}
    bases: tuple[type[BaseModel], ...] = (params, _FaultSpec)
    fields: dict[str, Any] = {"fault": (Literal[kind.name], ...), **extra}  # the kind's tag: a Literal made here
    entry = create_model(
        f"{_title(kind.name)}Spec",
        __base__=bases,
        __module__=__name__,
        __doc__=f"A {kind.name} fault's scenario entry.{where}",
        **fields,
    )
    return cast(type[_FaultSpec], entry)  # a subclass of its base _FaultSpec


def entry_classes() -> dict[str, type[_FaultSpec]]:
    """Every kind's scenario entry class, by kind, as the table (:data:`faults.kinds.KINDS`) has them now.

    >>> list(entry_classes()["slow"].model_fields)[-4:]
    ['repeat', 'fault', 'fraction', 'period_s']
    """
    return {name: _entry_class(k, INJECTORS[name]) for name, k in KINDS.items()}


@functools.lru_cache(maxsize=8)
def _union(entries: tuple[type[_FaultSpec], ...]) -> Any:
    return Annotated[Union[entries], Field(discriminator="fault")]  # noqa: UP007 (a runtime tuple: X | Y cannot spread it)


@functools.lru_cache(maxsize=8)
def _adapter(entries: tuple[type[_FaultSpec], ...]) -> TypeAdapter[Any]:
    return TypeAdapter(_union(entries))


class _ByKind:
    """Validates a fault entry as its kind's class, chosen when it is validated: a kind registered after this
    module was imported (:mod:`chaos.registry`) is accepted like the rest, with the same errors pydantic gives
    for a discriminated union (its tag in error paths: :func:`_is_tag` hides it)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            lambda value: _adapter(tuple(entry_classes().values())).validate_python(value),
            # dumped as its own class, parameters included (the declared type, _FaultSpec, has none)
            serialization=core_schema.wrap_serializer_function_ser_schema(
                lambda v, h: h(v), schema=core_schema.any_schema()
            ),
        )

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> Any:
        return handler(_adapter(tuple(entry_classes().values())).core_schema)  # the union's, as the table is now


FaultEntry = Annotated[_FaultSpec, _ByKind()]


def __getattr__(name: str) -> Any:
    """``FaultSpec``: the discriminated union of every kind's entry class, as the table has them when asked."""
    if name == "FaultSpec":
        return _union(tuple(entry_classes().values()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RandomSchedule(_Strict):
    """Seeded random faults: ``count`` faults drawn from ``faults`` (templates without timing)."""

    count: int = Field(ge=1, le=1000)
    faults: list[FaultEntry] = Field(min_length=1)
    window: tuple[float, float] = Field(description="[first, last] start time, seconds after the first merge")
    duration: tuple[float, float] = Field(description="[min, max] seconds")
    min_gap_s: float = Field(
        0.0, ge=0, description="at least this long between one fault's heal and the next start"
    )

    @model_validator(mode="after")
    def _ranges(self) -> RandomSchedule:
        for name in ("window", "duration"):
            lo, hi = getattr(self, name)
            if lo < 0 or hi < lo:
                raise ValueError(f"{name} must be [low, high] with 0 <= low <= high, got [{lo}, {hi}]")
        for i, f in enumerate(self.faults):
            if f.at is not None or f.at_merge is not None or f.duration is not None or f.repeat is not None:
                raise ValueError(
                    f"faults.{i}: a random template takes no at/at_merge/duration/repeat "
                    "(window and duration are drawn)"
                )
        return self


class Liveness(_Strict):
    """Merges keep happening while at least ``min_reachable`` learners are reachable."""

    enabled: bool = True
    max_gap_s: float | None = Field(
        None,
        gt=0,
        description="longest allowed gap between merges while enough are "
        "reachable, in seconds; unset: `rounds` of this run's "
        "own round time (chaos.checkers.bounds)",
    )
    rounds: float = Field(25.0, gt=0, description="the derived bound, in fragment rounds of this run")
    min_reachable: int = Field(
        1,
        ge=1,
        description="learners that must be reachable for merges to be owed; "
        "1 is Decoupled DiLoCo's claim (any one learner keeps training going)",
    )


class Reintegration(_Strict):
    """Every killed or cut-off learner gets a merged update within a bound of its heal.

    The bound is ``within_s`` seconds if given, else derived from the run's own pace (chaos.checkers.bounds):
    ``startups`` cold starts of the cluster (a restart is one) plus ``rounds`` fragment rounds.
    """

    enabled: bool = True
    within_s: float | None = Field(None, gt=0, description="a fixed bound in seconds; unset: derived")
    startups: float = Field(3.0, ge=0, description="the derived bound's multiple of this run's start-up time")
    rounds: float = Field(25.0, ge=0, description="the derived bound's multiple of this run's round time")
    eventually_rounds: float = Field(
        10.0,
        ge=0,
        description="the eventually phase starts this many rounds after the last learner is back from "
        "the last fault: from then to the end of training every learner alive and reachable "
        "must take part in merges at its fault-free rate (chaos.checkers.reintegration)",
    )

    @model_validator(mode="after")
    def _some_bound(self) -> Reintegration:
        if self.within_s is None and self.startups == 0 and self.rounds == 0:
            raise ValueError(
                "startups and rounds are both 0: the derived bound would be 0 s; give within_s instead"
            )
        return self


class Parity(_Strict):
    """Final eval loss within ``tolerance`` nats of the band the fault-free baselines span over seeds.

    One fault-free run is one draw of the run-to-run noise (seed, timing, load); the band of ``baseline_seeds``
    runs (cluster seeds s, s+1, …; cached by config) is what a fault-free run can look like, and a chaos run is
    judged against it plus ``tolerance``. Each seed draws its own data source, so the band is taken over the
    runs' excess above their own entropy floors and placed on this run's floor (chaos.checkers.parity).
    """

    enabled: bool = True
    tolerance: float | Literal["derived"] = Field(
        0.15,
        description="nats beyond the band; `derived`: from the band's own spread, a 99% prediction bound for "
        "one more fault-free run, t(n−1) · sd · √(1 + 1/n) over its n ≥ 3 seeds "
        "(chaos.checkers.parity.derived_tolerance)",
    )
    baseline_seeds: int = Field(3, ge=1, le=16, description="fault-free runs whose final losses make the band")

    @model_validator(mode="after")
    def _derivable(self) -> Parity:
        if self.tolerance == "derived" and self.baseline_seeds < 3:
            raise ValueError(
                f"tolerance: derived needs baseline_seeds >= 3 (the spread of {self.baseline_seeds} "
                "run(s) says nothing); give a number instead"
            )
        if not isinstance(self.tolerance, str) and self.tolerance <= 0:
            raise ValueError(f"tolerance must be > 0 or `derived`, got {self.tolerance}")
        return self


class Reference(_Strict):
    """Final eval loss within ``tolerance`` nats of synchronous DiLoCo on the same cluster, seed and tokens.

    Self-parity compares a configuration only with its own fault-free run, so it cannot see a trainer that is
    not the paper's algorithm; this check compares with the algorithm's reference (the paper: "the same ML
    performance"). It costs one more fault-free run per cluster config (cached like the baseline), so it is off
    unless a scenario asks for it.
    """

    enabled: bool = False
    tolerance: float = Field(0.05, gt=0)


class Durability(_Strict):
    """Versions never regress; a restarted syncer loses at most one checkpoint interval."""

    enabled: bool = True


class Safety(_Strict):
    """Global parameters stay finite; rejected uploads are never applied."""

    enabled: bool = True


class Goodput(_Strict):
    """Compute goodput: the fraction of learner compute (tokens trained) that ended up in merges.

    The check's bound is derived from the fault-free runs' goodput and the run's fault windows
    (chaos.checkers.goodput); ``min`` is its floor, and the bound when no fault-free run was measured. The default
    floor, 10%, is below every healthy run measured (23–76% across 47 real and 21 simulated runs of the built-ins,
    the container faults and the nightly tier, 2026-12-02/03; low by design: docs/scenarios-and-checks.md) and above
    a run that stalls (6% when a quorum of all learners loses one: a negative control)."""

    enabled: bool = True
    min: float = Field(0.1, ge=0, le=1)


class Audit(_Strict):
    """A model check of every merge (chaos.checkers.audit): each kept merge recomputed by an independent numpy
    reference from what it consumed, and digests chaining every merge of a fragment to the one before, to
    checkpoints, restores, the uploads received and the values learners hold."""

    enabled: bool = True


class Ledger(_Strict):
    """The token ledger (chaos.checkers.ledger): every uploaded token merged, superseded, refused with a reason,
    lost with the syncer or in flight at the end; the learners' and the syncer's books agree; the result is fixed
    within one round of the budget."""

    enabled: bool = True


class Checks(_Strict):
    liveness: Liveness = Liveness()
    reintegration: Reintegration = Reintegration()
    parity: Parity = Parity()
    reference: Reference = Reference()
    durability: Durability = Durability()
    safety: Safety = Safety()
    goodput: Goodput = Goodput()
    audit: Audit = Audit()
    ledger: Ledger = Ledger()

    @property
    def needs_baseline(self) -> bool:
        """Whether a run computes its fault-free baseline runs: only parity judges by them (the report shows the
        baseline's loss and the regime warning reads its merges only when there is one anyway).

        >>> Checks().needs_baseline, Checks(parity={"enabled": False}).needs_baseline
        (True, False)
        """
        return self.parity.enabled


class Scenario(_Strict):
    """A whole chaos experiment; see the module docstring for the file format."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,60}$")
    description: str = ""
    seed: int = Field(0, ge=0, description="seed of every random choice of the schedule")
    cluster: RunConfig = RunConfig()
    schedule: list[FaultEntry] = []
    random: RandomSchedule | None = None
    checks: Checks = Checks()
    timeout_s: float = Field(
        900.0,
        gt=0,
        description="the last resort for a run that keeps progressing but never "
        "finishes: give up (exit 2) after this long (a run whose "
        "progress stops is ended by the watchdog and judged first)",
    )

    @model_validator(mode="after")
    def _targets_and_timing(self) -> Scenario:
        known = learner_ids(self.cluster.algorithm.num_learners)
        m = len(known)
        specs = [(f"schedule.{i}", f) for i, f in enumerate(self.schedule)]
        specs += [(f"random.faults.{i}", f) for i, f in enumerate(self.random.faults)] if self.random else []
        ids = Counter(f.id for _, f in specs if f.id)
        dup = sorted(i for i, n in ids.items() if n > 1)
        if dup:
            raise ValueError(f"fault ids must be unique; repeated: {dup}")
        for where, f in specs:
            if where.startswith("schedule.") and (f.at is None and f.at_merge is None or f.duration is None):
                raise ValueError(f"{where}: needs a start ('at' seconds or 'at_merge') and a 'duration'")
            if KINDS[f.fault].syncer_only:
                if f.targets != [SYNCER]:
                    raise ValueError(f"{where}.targets: a {f.fault} targets ['syncer'] only")
                continue
            if isinstance(f.targets, RandomTargets):
                if f.targets.random > m:
                    raise ValueError(f"{where}.targets: random {f.targets.random} > {m} learners")
            elif isinstance(f.targets, list):
                if not f.targets:
                    raise ValueError(f"{where}.targets: empty; name learners, 'all' or {{random: n}}")
                allowed = known + ([SYNCER] if KINDS[f.fault].on_syncer else [])
                bad = [t for t in f.targets if t not in allowed]
                if bad:
                    raise ValueError(f"{where}.targets: unknown {bad}; this cluster has {allowed}")
        return self

    def learner_ids(self) -> list[str]:
        return learner_ids(self.cluster.algorithm.num_learners)

    def fault_free(self, k: int) -> Scenario:
        """Run ``k`` of this scenario's parity band: its cluster at seed ``seed + k`` with no fault
        (:meth:`trainer.config.RunConfig.fault_free_at`), named for the scenario.

        >>> s = Scenario.model_validate({"name": "kill", "cluster": {"seed": 4}, "schedule": [
        ...     {"fault": "kill", "targets": ["learner-0"], "at": 3, "duration": 5}]})
        >>> b = s.fault_free(1)
        >>> (b.name, b.cluster.seed, b.schedule, b.cluster == s.cluster.fault_free_at(5))
        ('kill-baseline-1', 5, [], True)
        """
        return self.model_copy(
            update={
                "name": f"{self.name[:48]}-baseline-{k}",
                "cluster": self.cluster.fault_free_at(self.cluster.seed + k),
                "schedule": [],
                "random": None,
            }
        )


def _is_tag(part: Any) -> bool:
    """Pydantic puts the union member's tag (e.g. 'kill') in error paths; users never wrote it."""
    return isinstance(part, str) and part in FAULT_KINDS


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate a scenario tree; errors name ``source`` and each bad field."""
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{source}: a scenario is a mapping (name:, cluster:, schedule:, checks:), got {type(data).__name__}"
        )
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(
            format_validation_error(
                err, source, "scenario", hide=_is_tag, model=Scenario, tag_models=entry_classes()
            )
        ) from None


def load_scenario(path: str | Path) -> Scenario:
    """Load and validate a scenario file (YAML or JSON)."""
    return parse_scenario(read_yaml_mapping(path, "scenario", ScenarioError), str(path))


BUILTIN_DIR = Path(__file__).resolve().parent / "scenarios"


def builtin_scenarios() -> dict[str, Path]:
    """Name -> file of every built-in scenario."""
    return {p.stem: p for p in sorted(BUILTIN_DIR.glob("*.yaml"))}


def scenario_with(name_or_path: str, **overrides: Any) -> Scenario:
    """A built-in (or file) scenario with some fields replaced; nested mappings are merged.

    >>> scenario_with("kill-and-rejoin", cluster={"algorithm": {"min_quorum": 2}}).cluster.algorithm.min_quorum
    2
    """
    path = resolve(name_or_path)
    if not overrides:
        return load_scenario(path)
    tree = merge_trees(read_yaml_mapping(path, "scenario", ScenarioError), overrides)
    return parse_scenario(tree, f"{path} (with overrides)")


def resolve(name_or_path: str) -> Path:
    """A built-in scenario's name, or a path to a scenario file."""
    p = Path(name_or_path)
    if p.exists():
        return p
    builtins = builtin_scenarios()
    if name_or_path in builtins:
        return builtins[name_or_path]
    raise ScenarioError(
        f"{name_or_path}: no such file and no built-in scenario of that name"
        f"{did_you_mean(name_or_path, builtins)}; built-ins: {', '.join(builtins)} "
        "(see `diloco-chaos list`)"
    )
