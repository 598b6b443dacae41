"""Typed run configuration: one file shared by the syncer and every learner.

A run is described by :class:`RunConfig` (YAML or JSON file, plus ``--set
a.b=value`` overrides). The ``algorithm.mode`` preset fills the fields left
unset and refuses contradictions:

=============  ===========  ============  ==========  =========  =========  ========  =======
mode           min_quorum   grace         staggered   overlap τ  blocking   H         rounds
=============  ===========  ============  ==========  =========  =========  ========  =======
decoupled      1 (any)      on            yes         2          no         any       clock
sync-diloco    M            off           no          0          yes        any       arrival
data-parallel  M            off           no          0          yes        1         arrival
=============  ===========  ============  ==========  =========  =========  ========  =======

Every DiLoCo mode uses DiLoCo's outer optimizer: Nesterov, lr 0.7, momentum 0.9.
Decoupled mode runs its rounds on the syncer's step clock (one merge per
scheduled round, contributions anchored at the round's start; see
:mod:`trainer.core.syncer_state`) and accepts contributions whose base is up
to ``max_staleness`` versions old (default M); the synchronous modes only the
current version. ``rounds: arrival`` with ``outer_gradient: base`` and outer
momentum 0.5 is the decoupled trainer before rounds existed, kept as a
negative control. data-parallel is gradient averaging: every step each learner
uploads its gradient, the syncer applies one AdamW update (the ``inner``
settings) to their mean and every learner receives the same parameters; it
has one fragment unless ``num_fragments`` says otherwise (then each fragment
is clipped by its own norm).

Example:
    >>> cfg = RunConfig.model_validate({"algorithm": {"mode": "sync-diloco", "num_learners": 3}})
    >>> a = cfg.algorithm
    >>> (a.min_quorum, a.grace, a.staggered, a.overlap_steps, a.blocking)
    (3, False, False, 0, True)
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.grace import QuorumPolicy
from trainer.errors import ConfigError

Mode = Literal["decoupled", "sync-diloco", "data-parallel"]
MODES: tuple[str, ...] = ("decoupled", "sync-diloco", "data-parallel")


class _Strict(BaseModel):
    # No NaN or infinity anywhere: a duration, bound or rate of inf/nan is never what a user meant.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSection(_Strict):
    size: Literal["tiny", "small"] = "tiny"


# A source's [V**order, V] float64 transition table lives in every learner and the syncer: 4M entries = 32 MB.
MAX_TRANSITION_ENTRIES = 1 << 22


class DataSection(_Strict):
    order: int = Field(1, ge=1, le=2, description="Markov order of the synthetic language")
    concentration: float = Field(0.1, gt=0, description="Dirichlet concentration of transition rows")
    older_classes: int | None = Field(
        None,
        ge=2,
        description="order 2: the older token enters the next-token law only through its residue mod "
        "this (trainer.data; 2 = one bit, an excess loss a benchmark's budget can still "
        "reduce); unset = the full context",
    )

    vocab_size: int | None = Field(
        None,
        ge=2,
        description="tokens of the synthetic language; the model's embedding and output layer follow "
        "it. Unset = the model size's own (64 for tiny). 256 with the tiny model: a bigram "
        "its 64-wide embedding learns gradually, still ~0.45 nats above the floor at 1.5M "
        "tokens (the quality benchmark's source)",
    )

    @model_validator(mode="after")
    def _older_classes_needs_order_2(self) -> DataSection:
        if self.order == 1 and self.older_classes is not None:
            raise ValueError(
                "older_classes groups the older token of an order-2 context: set data.order: 2, or drop it"
            )
        return self

    @model_validator(mode="after")
    def _transition_table_fits(self) -> DataSection:
        if self.vocab_size is not None and self.vocab_size ** (self.order + 1) > MAX_TRANSITION_ENTRIES:
            raise ValueError(
                f"vocab_size {self.vocab_size} with order {self.order} needs a transition table of "
                f"{self.vocab_size}^{self.order + 1} entries in every process (at most "
                f"{MAX_TRANSITION_ENTRIES:,}): lower vocab_size or the order"
            )
        return self

    eval_tokens: int = Field(
        65_536,
        ge=64,
        description="held-out eval tokens (batches of 64 sequences): at 64k tokens the eval loss's "
        "standard error is about 0.005 nats (at 2k tokens eval sets differed by SD 0.03)",
    )


class InnerSection(_Strict):
    """AdamW inner optimizer of every learner."""

    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(20, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    b1: float = Field(0.9, gt=0, lt=1)
    b2: float = Field(0.95, gt=0, lt=1)
    grad_clip: float = Field(1.0, gt=0)
    batch_size: int = Field(16, ge=1)
    decay: Literal["cosine", "constant"] = Field(
        "cosine", description="cosine: lr decays with the run's global token progress (from the syncer)"
    )
    final_lr_fraction: float = Field(0.1, ge=0, le=1, description="cosine decay ends at lr × this")


AUTO_OVERLAP_FLOOR = 2  # overlap_steps: auto never assumes a round trip shorter than the paper's τ


class AlgorithmSection(_Strict):
    mode: Mode = "decoupled"
    num_learners: int = Field(3, ge=1, description="M, learners the run is sized for")
    num_fragments: int | None = Field(None, ge=1, description="P (default 4; data-parallel 1)")
    sync_every: int | None = Field(
        None, ge=1, description="H, inner steps between two syncs of a fragment (default 8)"
    )
    overlap_steps: Annotated[int, Field(ge=0)] | Literal["auto"] | None = Field(
        None,
        description="tau, steps a merged fragment may take to come back; decoupled default 'auto': sized to "
        "the measured round trip (trainer.core.grace.effective_overlap), at least 2 (the paper's)",
    )
    min_quorum: int | None = Field(None, ge=1, description="K")
    grace: bool | None = None
    grace_gamma: float = Field(0.5, ge=0, lt=1)
    grace_cap_steps: float = Field(
        1.0,
        ge=0,
        description="the grace window's cap in steps of the cluster's pace (the paper: at most about one step)",
    )
    staggered: bool | None = None
    merge_rule: Literal["rda", "mean"] | None = Field(
        None,
        description="rda | mean for every tensor but embedding tables (always mean); decoupled default rda, "
        "sync-diloco default mean (DiLoCo's), data-parallel mean",
    )
    outer_lr: float | None = Field(None, gt=0)
    outer_momentum: float | None = Field(None, ge=0, lt=1)
    nesterov: bool = True
    mix_alpha: float | None = Field(
        None, ge=0, lt=1, description="None: overwrite on receipt; else keep alpha of local"
    )
    blocking: bool | None = None
    max_staleness: int | None = Field(
        None, ge=0, description="versions a contribution's base may lag; decoupled default M"
    )
    rounds: Literal["clock", "arrival"] | None = Field(
        None,
        description="clock (decoupled default): round r of fragment p opens at offset(p) + r*H steps of the "
        "syncer's step clock and merges exactly once; arrival: the first upload after a merge opens "
        "a round (the synchronous modes, and the negative control for decoupled)",
    )
    late_uploads: Literal["refuse", "carry"] = Field(
        "refuse",
        description="rounds=clock: an upload for a round that has merged is refused (the paper: it misses "
        "that merge) or carried into the fragment's next round, anchored at its start value",
    )
    outer_gradient: Literal["base", "current"] | None = Field(
        None,
        description="rounds=arrival only (rounds=clock always anchors at the round's start value): base "
        "(default) merges uploads as computed, against the global value the learner last received; "
        "current rebases a late upload onto the fragment's current value",
    )

    @model_validator(mode="after")
    def _apply_mode(self) -> AlgorithmSection:
        m = self.num_learners
        preset: dict[str, Any]
        if self.mode == "decoupled":
            preset = dict(
                min_quorum=1,
                grace=True,
                staggered=True,
                overlap_steps="auto",
                blocking=False,
                outer_lr=0.7,
                outer_momentum=0.9,
                max_staleness=m,
                rounds="clock",
            )
            required: dict[str, Any] = {}
            if self.rounds == "clock" or self.rounds is None:
                if self.outer_gradient == "base":
                    raise ValueError(
                        "rounds 'clock' anchors every contribution at its round's start value "
                        "(outer_gradient current); outer_gradient 'base' needs rounds 'arrival'"
                    )
                required["outer_gradient"] = "current"
        elif self.mode == "sync-diloco":
            preset = dict(
                outer_lr=0.7, outer_momentum=0.9, merge_rule="mean"
            )  # DiLoCo's plain mean; rda: a variant
            required = dict(
                min_quorum=m,
                grace=False,
                staggered=False,
                overlap_steps=0,
                blocking=True,
                max_staleness=0,
                rounds="arrival",
            )
        else:
            # Gradients averaged every step, one AdamW update at the syncer: the outer optimizer is the inner one.
            if self.outer_lr is not None or self.outer_momentum is not None:
                raise ValueError(
                    "mode 'data-parallel' applies the inner AdamW (inner.*) to the mean gradient at the "
                    "syncer: outer_lr and outer_momentum do not apply, leave them unset"
                )
            preset = dict(
                num_fragments=1
            )  # one fragment: clipping by the gradient's global norm, as one AdamW does
            required = dict(
                min_quorum=m,
                grace=False,
                staggered=False,
                overlap_steps=0,
                blocking=True,
                sync_every=1,
                max_staleness=0,
                merge_rule="mean",
                rounds="arrival",
                mix_alpha=None,
            )
        for name, value in required.items():
            given = getattr(self, name)
            if given is not None and given != value:
                raise ValueError(f"mode {self.mode!r} requires {name} = {value}, got {given}")
            object.__setattr__(self, name, value)
        preset.setdefault("num_fragments", 4)
        preset.setdefault("sync_every", 8)
        preset.setdefault("merge_rule", "rda")
        preset.setdefault("outer_gradient", "base")
        for name, value in preset.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if self.min_quorum > m:
            raise ValueError(f"min_quorum ({self.min_quorum}) cannot exceed num_learners ({m})")
        return self

    @property
    def overlap_auto(self) -> bool:
        """τ follows the measured round trip (``overlap_steps: auto``)."""
        return self.overlap_steps == "auto"

    def quorum_policy(self) -> QuorumPolicy:
        """Minimum quorum and the grace window's parameters, as the syncer and both simulators use them.

        >>> AlgorithmSection(mode="decoupled", num_learners=4).quorum_policy().min_quorum
        1
        """
        return QuorumPolicy(
            self.min_quorum,
            bool(self.grace),
            self.grace_gamma,
            self.grace_cap_steps,
            self.overlap_floor,
            self.overlap_auto,
        )

    @property
    def overlap_floor(self) -> int:
        """τ in steps as the schedule uses it: the configured one, or with ``auto`` its floor, the paper's 2 (a
        learner applies a result when it arrives, and never before this many steps after its sync started)."""
        return AUTO_OVERLAP_FLOOR if self.overlap_steps == "auto" else int(self.overlap_steps or 0)

    def fragment_schedule(self) -> FragmentSchedule:
        """When each fragment syncs and may apply its result: the one schedule the learner, the syncer's policy and
        the scale simulator all read (P fragments every H steps, staggered or not, τ its floor).

        >>> build_config({"algorithm": {"num_fragments": 2, "sync_every": 4}}).algorithm.fragment_schedule().offset(0)
        2
        """
        return FragmentSchedule(
            int(self.num_fragments or 1), int(self.sync_every or 1), self.overlap_floor, bool(self.staggered)
        )


class SyncerSection(_Strict):
    checkpoint_every_merges: int = Field(20, ge=1)
    eval_every_merges: int = Field(20, ge=1)
    liveness_timeout_s: float = Field(5.0, gt=0)
    settle_s: float = Field(
        0.0,
        ge=0,
        description="after the token budget (final eval and checkpoint at the budget), keep merging for "
        "up to this long while a learner is away or not merged since it came back: a chaos "
        "run lasts until its reintegration check can decide (0: stop at the budget)",
    )
    validate_uploads: bool = Field(True, description="False only for negative-control experiments")
    max_upload_bytes: int = Field(256 * 1024 * 1024, ge=1)
    max_norm_ratio: float = Field(
        100.0,
        ge=0,
        description="refuse updates whose norm per step exceeds this many "
        "times the fragment's recent average (0: off)",
    )
    max_speedup: float = Field(
        4.0,
        gt=0,
        description="a learner's step counts are capped at what this many times the cluster's pace "
        "allows in the time it had (a faster learner's claims are counted late, not refused)",
    )
    audit_keep_fraction: float = Field(
        0.2,
        ge=0,
        le=1,
        description="merge audit: every merge is digested; this seeded fraction is also kept whole "
        "under the run directory's audit/ for the checker to recompute (1: all; "
        "deterministic mode keeps all)",
    )
    planted_bug: Literal["none", "forget_rejoined"] = Field(
        "none", description="tests of the chaos harness only: switch on a deliberate syncer defect"
    )


class LearnerSection(_Strict):
    report_interval_s: float = Field(0.5, gt=0)
    step_event_every: int = Field(10, ge=1)
    rpc_timeout_s: float = Field(10.0, gt=0)
    long_poll_s: float = Field(2.0, gt=0)
    step_delay_s: float = Field(0.0, ge=0, description="sleep after each step: emulates slower hardware")
    start_together_s: float = Field(
        0.0,
        ge=0,
        description="first start only: compile, then wait up to this long until all M learners joined, so "
        "their fragment schedules start in step (0: start at once)",
    )
    step_delay_overrides: dict[str, float] = Field(
        default_factory=dict, description="learner id -> its own step_delay_s (heterogeneous hardware)"
    )
    sync_lookahead: Literal["mean", "quantile"] = Field(
        "mean",
        description="how far ahead a learner looks for its next step boundary when it decides to sync: its "
        "mean step time, or the (1 - 1/H) quantile of its recent ones (trainer.core.step_timer)",
    )

    @model_validator(mode="after")
    def _check_overrides(self) -> LearnerSection:
        for lid, d in self.step_delay_overrides.items():
            if d < 0:
                raise ValueError(f"step_delay_overrides.{lid}: must be >= 0 seconds, got {d}")
        return self

    def step_delay_for(self, learner_id: str) -> float:
        """The step delay of one learner: its override, else ``step_delay_s``.

        Example:
            >>> LearnerSection(step_delay_s=0.1, step_delay_overrides={"learner-0": 0.2}).step_delay_for("learner-0")
            0.2
        """
        return self.step_delay_overrides.get(learner_id, self.step_delay_s)


def learner_ids(n: int) -> list[str]:
    """The ids of a cluster's ``n`` learners.

    >>> learner_ids(2)
    ['learner-0', 'learner-1']
    """
    return [f"learner-{i}" for i in range(n)]


class RunConfig(_Strict):
    """Everything a run needs; shared verbatim by the syncer and the learners."""

    seed: int = Field(0, ge=0, description="init, data and eval seeds derive from it")
    token_budget: int = Field(200_000, ge=1, description="tokens all learners together train on")
    model: ModelSection = ModelSection()
    data: DataSection = DataSection()
    inner: InnerSection = InnerSection()
    algorithm: AlgorithmSection = AlgorithmSection()
    syncer: SyncerSection = SyncerSection()
    learner: LearnerSection = LearnerSection()

    def config_hash(self) -> str:
        """Stable hash of the canonical JSON form of what is trained; learners must match the syncer's.

        What only changes what is recorded (``syncer.audit_keep_fraction``) is left out: runs that differ in it
        train alike and share cached baselines and measurements.

            >>> RunConfig().config_hash() == RunConfig.model_validate({"syncer": {"audit_keep_fraction": 1}}).config_hash()
            True
        """
        tree = self.model_dump(mode="json")
        tree["syncer"].pop("audit_keep_fraction")
        blob = json.dumps(tree, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def fault_free_at(self, seed: int) -> RunConfig:
        """This run's fault-free baseline at ``seed``, with no settle phase.

        A fault-free run has nobody to wait for and its result is fixed at the budget either way, so runs that
        differ only in ``settle_s`` share one cached baseline.

        Example:
            >>> c = RunConfig.model_validate({"seed": 4, "syncer": {"settle_s": 60}})
            >>> b = c.fault_free_at(5)
            >>> (b.seed, b.syncer.settle_s, c.fault_free_at(4) == RunConfig.model_validate({"seed": 4}))
            (5, 0.0, True)
        """
        tree = self.model_dump(mode="json")
        tree["seed"] = seed
        tree["syncer"]["settle_s"] = 0.0
        return RunConfig.model_validate(tree)

    def sync_diloco_reference(self) -> RunConfig:
        """The same run as synchronous DiLoCo: the algorithm's reference at equal tokens, seed, model and data.

        M, P and H carry over; everything else of the algorithm is the sync-diloco preset, DiLoCo's own
        (K = M, no grace, aligned fragments, blocking, plain mean, Nesterov lr 0.7 momentum 0.9): the
        reference does not inherit the settings under test.

        Example:
            >>> ref = RunConfig().sync_diloco_reference()
            >>> (ref.algorithm.mode, ref.algorithm.min_quorum, ref.algorithm.merge_rule, ref.token_budget)
            ('sync-diloco', 3, 'mean', 200000)
        """
        a = self.algorithm
        algorithm = {
            "mode": "sync-diloco",
            "num_learners": a.num_learners,
            "num_fragments": a.num_fragments,
            "sync_every": a.sync_every,
        }
        return RunConfig.model_validate({**self.model_dump(mode="json"), "algorithm": algorithm})


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: {part!r} is not a section")
        node = nxt
    node[parts[-1]] = value


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> nested dict, values parsed as YAML scalars."""
    tree: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. algorithm.min_quorum=2")
        key, raw = item.split("=", 1)
        _set_path(tree, key.strip(), yaml.safe_load(raw))
    return tree


def merge_trees(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` laid over ``base``, recursively for nested sections (neither is modified)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge_trees(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def format_validation_error(
    err: ValidationError,
    source: str,
    what: str = "configuration",
    hide: Callable[[Any], bool] = lambda part: False,
    model: type[BaseModel] | None = None,
    tag_models: Mapping[str, type[BaseModel]] | None = None,
) -> str:
    """One line per bad field, ``path.to.field: message``; ``hide`` drops path parts the user never wrote. Given
    the ``model`` validated (and the model each union tag in a path picks), a misspelt field name gets the
    closest real one (``did you mean min_quorum?``)."""
    lines = [f"{source}: invalid {what}"]
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"] if not hide(x)) or "(top level)"
        hint = ""
        if model is not None and e["type"] == "extra_forbidden" and e["loc"]:
            hint = did_you_mean(str(e["loc"][-1]), fields_at(model, tuple(e["loc"][:-1]), tag_models or {}))
        lines.append(f"  {loc}: {e['msg'].removeprefix('Value error, ')}{hint}")
    return "\n".join(lines)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``choices``, or nothing when none is close.

    >>> did_you_mean("min_quorom", ["min_quorum", "grace"]), did_you_mean("zzz", ["grace"])
    (' (did you mean min_quorum?)', '')
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def fields_at(
    model: type[BaseModel], path: tuple[Any, ...], tag_models: Mapping[str, type[BaseModel]] | None = None
) -> set[str]:
    """The field names a model accepts at ``path``: list indexes pass through, a union tag picks its member from
    ``tag_models`` (a union without one offers the fields of all its members)."""
    here: list[type[BaseModel]] = [model]
    for part in path:
        if isinstance(part, int):
            continue
        tagged = (tag_models or {}).get(part)
        if tagged is not None and any(issubclass(tagged, t) for t in here):
            here = [tagged]
            continue
        nxt = [m for t in here if part in t.model_fields for m in _models_in(t.model_fields[part].annotation)]
        here = nxt or here  # not a field of any: a tag we were not told of, which names no level of its own
    return {name for t in here for name in t.model_fields}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (through Optional, unions, lists, dicts and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def build_config(data: dict[str, Any], source: str = "<config>", overrides: list[str] | None = None) -> RunConfig:
    """Validate a config tree (plus overrides); errors name ``source`` and each bad field."""
    tree = merge_trees(data, parse_overrides(overrides or []))
    try:
        return RunConfig.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, model=RunConfig)) from None


MAX_FILE_BYTES = 1 << 20  # a config or scenario is a page of YAML; a megabyte is a mistake
MAX_DEPTH = 32  # nesting levels (the schemas use fewer than 8)
MAX_VALUES = 100_000  # values after YAML aliases are expanded ("billion laughs" stops here)


def read_yaml_mapping(path: str | Path, what: str, error: type[Exception]) -> dict[str, Any]:
    """The mapping at the top of a YAML/JSON file; ``error`` (naming the file) for anything else.

    Whatever the bytes, the answer is the mapping or ``error``: non-UTF-8 text, deep nesting, aliases that
    refer to themselves or expand without bound, and oversized files are refused by name, never a traceback.
    """
    source = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise error(f"{source}: cannot read {what} file: {err.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise error(f"{source}: larger than {MAX_FILE_BYTES // 1024} KiB; a {what} file is a page of YAML")
    return parse_yaml_mapping(raw, source, what, error)


def parse_yaml_mapping(raw: bytes, source: str, what: str, error: type[Exception]) -> dict[str, Any]:
    """:func:`read_yaml_mapping` for bytes already read.

    >>> parse_yaml_mapping(b"a: 1", "x.yaml", "config", ValueError)
    {'a': 1}
    >>> parse_yaml_mapping(b"a: " + b"[" * 100 + b"]" * 100, "x.yaml", "config", ValueError)
    Traceback (most recent call last):
    ValueError: x.yaml: nested deeper than 32 levels
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(
            f"{source}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); save the "
            f"{what} file as UTF-8"
        ) from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise error(f"{source}: not valid YAML{where}: {getattr(err, 'problem', None) or err}") from None
    except RecursionError:
        raise error(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise error(f"{source}: top level must be a mapping, got {type(loaded).__name__}")
    problem = _shape_problem(loaded)
    if problem:
        raise error(f"{source}: {problem}")
    return loaded


def _shape_problem(tree: Any) -> str | None:
    """Why a loaded tree cannot be validated safely (too deep, too many values, an alias inside itself); None if
    it can. Iterative, and it stops at the limits, so its own cost is bounded whatever the tree."""
    stack: list[tuple[Any, int, frozenset[int]]] = [(tree, 1, frozenset())]
    seen = 0
    while stack:
        node, depth, parents = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return f"more than {MAX_VALUES:,} values once YAML aliases are expanded"
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels"
        if isinstance(node, (dict, list)):
            if id(node) in parents:
                return "a YAML alias refers to a value that contains it"
            children = node.values() if isinstance(node, dict) else node
            inner = parents | {id(node)}
            stack.extend((c, depth + 1, inner) for c in children)
    return None


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    """Load a YAML/JSON config file (or defaults when ``path`` is None) and apply overrides."""
    if path is None:
        return build_config({}, "<defaults>", overrides)
    return build_config(read_yaml_mapping(path, "config", ConfigError), str(path), overrides)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--config`` / ``--set`` flags every entry point shares."""
    parser.add_argument("--config", help="run config file (YAML/JSON); defaults when omitted")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")


def config_from_arguments(args: argparse.Namespace) -> RunConfig:
    """Load the config the flags name; on a bad config print the error and exit with status 2."""
    try:
        return load_config(args.config, args.set)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
