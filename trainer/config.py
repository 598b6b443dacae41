"""Typed run configuration: one file shared by the syncer and every learner.

A run is described by :class:`RunConfig` (YAML or JSON file, plus ``--set
a.b=value`` overrides). Its ``algorithm`` section is
:class:`trainer.core.algorithm.Algorithm`: the ``algorithm.mode`` preset fills
the settings left unset and refuses contradictions, once, while the file is
read (the modes' table is there).

Example:
    >>> cfg = RunConfig.model_validate({"algorithm": {"mode": "sync-diloco", "num_learners": 3}})
    >>> a = cfg.algorithm
    >>> (a.min_quorum, a.grace, a.staggered, a.overlap_steps, a.blocking)
    (3, False, False, 0, True)

Why one module: it is the run config's whole schema and its loading (files, ``--set``, error messages).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainer.core.algorithm import Algorithm
from trainer.core.drift import DRIFT_K, DRIFT_WINDOW
from trainer.errors import ConfigError

__all__ = [
    "RunConfig",
    "ModelSection",
    "DataSection",
    "InnerSection",
    "SyncerSection",
    "LearnerSection",
    "learner_ids",
    "build_config",
    "load_config",
    "parse_overrides",
    "merge_trees",
    "format_validation_error",
    "did_you_mean",
    "read_yaml_mapping",
    "parse_yaml_mapping",
    "add_config_arguments",
    "config_from_arguments",
    "MAX_FILE_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "MAX_TRANSITION_ENTRIES",
]


# Settings added after configs were hashed into committed measurements and cached baselines: the hash leaves each
# out while it has its default (which trains exactly as before it existed), so those stay valid.
ADDED_SETTINGS = (
    ("model", "compute_dtype"),
    ("data", "source"),
    ("algorithm", "wire_format"),
    ("algorithm", "grace_waits_for"),
    ("algorithm", "weighting"),
    ("syncer", "drift_k"),
    ("syncer", "drift_window"),
)


class _Strict(BaseModel):
    # No NaN or infinity anywhere: a duration, bound or rate of inf/nan is never what a user meant.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSection(_Strict):
    size: Literal["tiny", "small", "wide"] = Field(
        "tiny",
        description="trainer.model.MODEL_SIZES: tiny (0.1M parameters, the per-change tests), small (3.3M, "
        "real-text chaos runs), wide (6.6M: 53 MB of parameters and outer momentum, for state-size effects)",
    )
    compute_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="the matmuls' dtype; weights, gradients and optimizer state stay fp32"
    )


# A source's [V**order, V] float64 transition table lives in every learner and the syncer: 4M entries = 32 MB.
MAX_TRANSITION_ENTRIES = 1 << 22


class DataSection(_Strict):
    source: Literal["markov", "text"] = Field(
        "markov",
        description="markov: a seeded synthetic Markov source with a known entropy floor (trainer.data); text: "
        "the pinned real-text corpus, byte-level (V = 256; trainer.corpus, trainer.text_source), the same "
        "bytes and split for every seed",
    )
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
    def _text_has_no_markov_settings(self) -> DataSection:
        if self.source == "text":
            # Away from their defaults only: a config written out whole (the controller's config.yaml) has them all.
            fields = type(self).model_fields
            markov = [
                n for n in ("concentration", "older_classes", "order") if getattr(self, n) != fields[n].default
            ]
            if markov:
                raise ValueError(
                    f"real text has no {' / '.join(markov)} (settings of the synthetic Markov source): drop them, "
                    "or set data.source: markov"
                )
            if self.vocab_size not in (None, 256):
                raise ValueError(
                    f"real text is byte-level (vocab_size 256), not {self.vocab_size}: drop vocab_size"
                )
        return self

    @property
    def model_vocab(self) -> int | None:
        """The vocabulary the model is sized to: the data's (256 bytes for text), None for the size's own."""
        return 256 if self.source == "text" else self.vocab_size

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
    drift_k: float = Field(
        0.0,
        ge=0,
        description="refuse the uploads of a learner whose pull on the merges, summed over about drift_window "
        f"merges of a fragment, is above drift_k × √drift_window lr per step (trainer.core.drift; {DRIFT_K:g} when "
        "enforced; 0, the default: summed and recorded in merge events, not enforced — honest uploads delayed by "
        "slow links can pull that far: docs/security.md, drift)",
    )
    drift_window: float = Field(DRIFT_WINDOW, ge=1, description="merges of a fragment the drift sum spans")
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
    audit_keep_bytes: int = Field(
        1_000_000_000,
        ge=0,
        description="merge audit: at most this many bytes of kept merges under audit/ (those already there after a "
        "restart count); past it merges are only digested (a long or data-parallel run would fill a disk)",
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
    algorithm: Algorithm = Algorithm()
    syncer: SyncerSection = SyncerSection()
    learner: LearnerSection = LearnerSection()

    def config_hash(self) -> str:
        """Stable hash of the canonical JSON form of what is trained; learners must match the syncer's.

        What only changes what is recorded (``syncer.audit_keep_fraction``, ``syncer.audit_keep_bytes``) is left
        out: runs that differ in it train alike and share cached baselines and measurements.

            >>> RunConfig().config_hash() == RunConfig.model_validate({"syncer": {"audit_keep_fraction": 1}}).config_hash()
            True
        """
        tree = self.model_dump(mode="json")
        tree["syncer"].pop("audit_keep_fraction")
        tree["syncer"].pop("audit_keep_bytes")
        for section, name in ADDED_SETTINGS:  # at its default, a setting added later trains as before it existed
            if tree[section][name] == type(self).model_fields[section].default.model_dump(mode="json")[name]:
                tree[section].pop(name)
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
