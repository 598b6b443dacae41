"""The planted defects: one registry of mutants, each a realistic trainer bug applied by monkeypatching.

Test machinery only: nothing under ``trainer/``, ``chaos/`` or ``faults/`` imports this package, so no user's
config or installed package can reach a mutant. Deterministic mode (:mod:`chaos.sim`) runs the real core state
machines in one process, so replacing a core function (where it is *looked up*: ``from x import y`` binds ``y`` in
the importing module, so ``trainer.core.syncer_state.token_weight`` is patched, not ``trainer.core.merge``'s) changes
the simulated trainer. Every patch is at function or method granularity: a mutant wraps or replaces one helper,
never a copy of a large method (``SyncerState.merge`` calls the helpers patched here).

Each mutant says where the suite applies it (:attr:`Mutant.modes`): ``sim``, deterministic mode's one process
(:mod:`tests.mutants.runner`, per change); ``real``, the syncer and learner processes of a real run
(:mod:`tests.mutants.real`, nightly: tests/nightly/test_mutants_real.py). A patch of ``chaos.sim`` means nothing to a
real process and one of the gRPC shells (``trainer.syncer``, ``trainer.learner``, ``trainer.training``) nothing to
deterministic mode; the shared core (``trainer.core``) means the same in both (:data:`PATCH_MODES`).

Example:
    >>> m = MUTANTS_BY_NAME["uniform_weights"]
    >>> m.mechanism, [s.label for s in m.scenarios]
    ('weights', ['straggler', 'kill-and-rejoin'])
    >>> import trainer.core.syncer_state as ss
    >>> ss.token_weight(600, 3)
    120000.0
    >>> with m.applied():
    ...     ss.token_weight(600, 3)
    1.0
    >>> ss.token_weight(600, 3)  # restored on exit
    120000.0
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chaos.scenario import Scenario, scenario_with

# The mechanisms a mutant may break (issue 38, item 7), in the order the matrix lists them.
MECHANISMS: tuple[str, ...] = (
    "outer optimizer state",
    "merge arithmetic",
    "weights",
    "rebase",
    "quorum and grace",
    "late-round handling",
    "broadcast/wake-up",
    "restore",
    "rejoin state fetch",
    "rejoin membership",
    "data position",
    "NaN and outlier guards",
    # Issue 60: defects whose records are wrong the same way as their behaviour (the checks must not take the
    # syncer's word for what it did).
    "outer step hyperparameters",
    "budget counting",
    "initial state",
    "merge participants",
    "learner receiving side",
)

MODES = ("sim", "real")  # deterministic mode's one process; the syncer's and learners' processes of a real run
SIM, REAL, BOTH = ("sim",), ("real",), ("sim", "real")

# Where a patch of a module means something, by the module's dotted prefix (the longest that matches wins).
PATCH_MODES: dict[str, frozenset[str]] = {
    "chaos.sim": frozenset(SIM),  # the simulated nodes and runner: no real process runs them
    "trainer.core": frozenset(BOTH),  # the pure core, shared by the gRPC shells and deterministic mode
    "trainer": frozenset(REAL),  # the gRPC shells and the learner's JAX setup: deterministic mode runs none of it
}


def patch_modes(module: str) -> frozenset[str]:
    """Where a patch of ``module`` means something.

    >>> sorted(patch_modes("trainer.core.syncer_state")), sorted(patch_modes("trainer.syncer"))
    (['real', 'sim'], ['real'])
    >>> sorted(patch_modes("chaos.sim.syncer_node"))
    ['sim']
    """
    best = max((p for p in PATCH_MODES if module == p or module.startswith(p + ".")), key=len, default=None)
    if best is None:
        raise ValueError(f"a mutant patch of {module}: no mode is known for it (add it to PATCH_MODES)")
    return PATCH_MODES[best]


@dataclass(frozen=True)
class ScenarioRef:
    """A built-in scenario (``chaos/scenarios/<name>.yaml``), optionally with overrides (:func:`scenario_with`)."""

    name: str
    label: str = ""  # how the matrix names it; defaults to ``name``
    overrides: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.name)

    def load(self, seed: int = 0) -> Scenario:
        """The scenario; ``seed`` > 0 draws another schedule and data (scenario and cluster seed), 0 is the file's.

        >>> ScenarioRef("kill-and-rejoin").load(2).cluster.seed
        2
        """
        overrides = dict(self.overrides)
        if seed:
            overrides["seed"] = seed
            overrides["cluster"] = {**overrides.get("cluster", {}), "seed": seed}
        return scenario_with(self.name, **overrides)


@dataclass(frozen=True)
class Patch:
    """Replace ``module``'s attribute ``attr`` (a dotted path: ``SyncerState._rebased``) by ``make(original)``.

    ``original`` is what the attribute is bound to as looked up (a bound classmethod for a classmethod); the
    replacement is set as is (wrap a method's replacement in ``classmethod`` where the original was one).
    """

    module: str
    attr: str
    make: Callable[[Any], Any] = field(compare=False)

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attr}"

    def _owner(self) -> tuple[Any, str]:
        owner: Any = importlib.import_module(self.module)
        *path, name = self.attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        if not hasattr(owner, name):
            raise AttributeError(f"mutant patch {self.target}: no such attribute (renamed?)")
        return owner, name

    @property
    def modes(self) -> frozenset[str]:
        """Where this patch means something (:data:`PATCH_MODES`, by the patched module)."""
        return patch_modes(self.module)

    @contextmanager
    def applied(self, observe: Callable[[str], None] | None = None) -> Iterator[None]:
        """The patch in force; ``observe(target)`` is called each time the replacement is (real processes record
        that the mutated code ran: :mod:`tests.mutants.real`)."""
        owner, name = self._owner()
        own = name in vars(owner)
        static = inspect.getattr_static(owner, name)
        replacement = self.make(getattr(owner, name))
        setattr(
            owner, name, replacement if observe is None else _observed(replacement, lambda: observe(self.target))
        )
        try:
            yield
        finally:
            if own:
                setattr(owner, name, static)
            else:
                delattr(owner, name)


@dataclass(frozen=True)
class Mutant:
    """One planted defect: the realistic bug it stands for, the mechanism it breaks, where it shows."""

    name: str
    mechanism: str  # one of MECHANISMS
    description: str  # the realistic bug, in one line
    scenarios: tuple[ScenarioRef, ...]  # built-ins that reach it
    patches: tuple[Patch, ...]
    # It acts only on a fault's path (a restore, a rejoin, a corrupt upload), so a fault-free run is bit for bit the
    # unmutated one: its runs share the unmutated fault-free baselines (3 seeds of parity's band) instead of
    # recomputing them. Claimed here, verified by runner.fault_free_unchanged (the matrix and the per-change tier).
    fault_free_unchanged: bool = False
    # Where the suite applies it: "sim" (deterministic mode, per change), "real" (the processes of a real run,
    # nightly). Never where a patch means nothing (PATCH_MODES); "real" only with fault_free_unchanged, since the
    # real tier judges it against the unmutated fault-free baselines (a core mutant that changes fault-free runs
    # stays "sim": on real processes its three baselines would have to run it too, ~3.5 min each, for the core
    # code the per-change tier already runs).
    modes: tuple[str, ...] = ("sim",)

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mutant {self.name}: unknown mechanism {self.mechanism!r}")
        if not self.scenarios or not self.patches:
            raise ValueError(f"mutant {self.name}: needs a scenario and a patch")
        if not self.modes or set(self.modes) - set(MODES):
            raise ValueError(f"mutant {self.name}: modes {self.modes!r} not a non-empty subset of {MODES}")
        for p in self.patches:
            if set(self.modes) - p.modes:
                raise ValueError(
                    f"mutant {self.name}: {p.target} means nothing in mode(s) {sorted(set(self.modes) - p.modes)}"
                )
        if "real" in self.modes and not self.fault_free_unchanged:
            raise ValueError(
                f"mutant {self.name}: a real-process mutant must be fault_free_unchanged (the real tier "
                "shares the unmutated fault-free baselines)"
            )

    @contextmanager
    def patched(self, observe: Callable[[str], None] | None = None) -> Iterator[None]:
        """Its patches in force, nothing else (what a real process applies for its lifetime)."""
        with _all(self.patches, observe):
            yield

    @contextmanager
    def applied(self, share_baselines: bool | None = None) -> Iterator[None]:
        """The mutant in force: its patches, and deterministic mode's memoised fault-free baselines set aside (a
        mutant's baseline runs the mutant too, as a real run's baseline runs the same build) unless they are shared
        (``share_baselines``; default: :attr:`fault_free_unchanged`)."""
        if "sim" not in self.modes:
            raise ValueError(f"mutant {self.name} applies to real processes only (tests/mutants/real.py)")
        import chaos.sim.runner as runner

        if not hasattr(runner, "_BASELINES"):
            raise AttributeError("chaos.sim.runner._BASELINES is gone: update Mutant.applied to its new memo")
        share = self.fault_free_unchanged if share_baselines is None else share_baselines
        saved = runner._BASELINES
        if not share:
            runner._BASELINES = {}
        try:
            with self.patched():
                yield
        finally:
            runner._BASELINES = saved


@contextmanager
def _all(patches: tuple[Patch, ...], observe: Callable[[str], None] | None = None) -> Iterator[None]:
    if not patches:
        yield
        return
    with patches[0].applied(observe), _all(patches[1:], observe):
        yield


def _observed(replacement: Any, hit: Callable[[], None]) -> Any:
    """``replacement`` calling ``hit()`` first on each call (a classmethod's function likewise); anything not a
    function as is.

    >>> calls = []
    >>> f = _observed(lambda x: x + 1, lambda: calls.append(1))
    >>> f(1), f(2), len(calls)
    (2, 3, 2)
    """
    if isinstance(replacement, classmethod):
        return classmethod(_observed(replacement.__func__, hit))
    if not inspect.isfunction(replacement):
        return replacement

    @functools.wraps(replacement)
    def observed(*args: Any, **kwargs: Any) -> Any:
        hit()
        return replacement(*args, **kwargs)

    return observed


def refs(*names: str) -> tuple[ScenarioRef, ...]:
    return tuple(ScenarioRef(n) for n in names)


SS = "trainer.core.syncer_state"
SYNCER_NODE, LEARNER_NODE = "chaos.sim.syncer_node", "chaos.sim.learner_node"  # deterministic mode's nodes
LEARNER, SYNCER_SHELL, TRAINING = "trainer.learner", "trainer.syncer", "trainer.training"  # the shells (real only)
RESTORE_SHELL = "trainer.restore"  # the syncer shell's restore path (real only)

# A corrupt learner that sends random bit patterns (mostly finite, absurd magnitudes): the outlier guard's case.
# corrupt-learner's own schedule with mode garbage instead of nan.
CORRUPT_GARBAGE = ScenarioRef(
    "corrupt-learner",
    "corrupt-learner[garbage]",
    {"schedule": [{"fault": "corrupt", "mode": "garbage", "targets": ["learner-1"], "at": 3, "duration": 40}]},
)

# A learner killed (and restarted) before the syncer crashes: its first incarnation's tokens are then only in the
# syncer's checkpointed ledger (every live incarnation reports its cumulative count again after a restore).
SYNCER_CRASH_AFTER_KILL = ScenarioRef(
    "syncer-crash",
    "syncer-crash[after kill]",
    {
        "schedule": [
            {"fault": "kill", "targets": ["learner-1"], "at": 2, "duration": 3},
            {"fault": "syncer_crash", "at": 8, "duration": 4},
        ]
    },
)

# The same, the learner killed later: its first incarnation trained ~10 rounds' worth that only the syncer's
# checkpointed ledger holds after the crash (killed at 2 s it trains too little for the learners' count to show it).
SYNCER_CRASH_AFTER_LATE_KILL = ScenarioRef(
    "syncer-crash",
    "syncer-crash[after late kill]",
    {
        "schedule": [
            {"fault": "kill", "targets": ["learner-1"], "at": 8, "duration": 3},
            {"fault": "syncer_crash", "at": 14, "duration": 4},
        ]
    },
)


# ---- the mutants' replacements ------------------------------------------------------------------------------------


def _fresh_momentum_each_step(outer_step: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(opt: Any, state: Any, params: Any, outer_grad: Any, scale: float = 1.0) -> Any:
        return outer_step(opt, opt.init(params), params, outer_grad, scale)  # BUG: the carried state is dropped

    return mutant


def _restore_without_momentum(from_checkpoint: Callable[..., Any]) -> Any:
    def mutant(cls: Any, policy: Any, fragments: Any, arrays: Any, meta: Any, version_skip: int) -> Any:
        st = from_checkpoint(policy, fragments, arrays, meta, version_skip)
        st.opt_states = [policy.optimizer.init(st._frag(st.params, f)) for f in fragments]  # BUG
        return st

    return classmethod(mutant)


def _drop_last_contribution(merge_fragment: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(vectors: Any, weights: Any, rule: Any, mean_tensors: Any = ()) -> Any:
        if len(vectors) > 1:
            vectors, weights = vectors[:-1], weights[:-1]  # BUG: an off-by-one slice
        return merge_fragment(vectors, weights, rule, mean_tensors)

    return mutant


def _mean_rule(merge_fragment: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(vectors: Any, weights: Any, rule: Any, mean_tensors: Any = ()) -> Any:
        return merge_fragment(vectors, weights, "mean", mean_tensors)  # BUG: the configured rule is not passed on

    return mutant


def _flipped_sign(merge_fragment: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(vectors: Any, weights: Any, rule: Any, mean_tensors: Any = ()) -> Any:
        return {n: -t for n, t in merge_fragment(vectors, weights, rule, mean_tensors).items()}  # BUG: θ − Θ

    return mutant


def _misaligned_weights(merge_fragment: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(vectors: Any, weights: Any, rule: Any, mean_tensors: Any = ()) -> Any:
        return merge_fragment(vectors, list(reversed(weights)), rule, mean_tensors)  # BUG: pairs the wrong weights

    return mutant


def _uniform_weight(token_weight: Callable[..., float]) -> Callable[..., float]:
    def mutant(c_tokens: int, c_steps: int, weighting: str = "tokens") -> float:
        return 1.0  # BUG: quantity × quality dropped

    return mutant


def _not_rebased(rebased: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any, c: Any, glob: Any) -> Any:
        return c.tensors  # BUG: an update against an older base merged as if made against the round's start

    return mutant


def _no_grace(merge_time: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(policy: Any, *args: Any, **kw: Any) -> Any:
        return merge_time(dataclasses.replace(policy, grace=False), *args, **kw)  # BUG: grace ignored

    return mutant


def _quorum_off_by_one(merge_time: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(
        policy: Any, timing: Any, quorum_at: Any, contributions: int, active_learners: int, opened_at: Any = None
    ) -> Any:
        if contributions <= policy.min_quorum:  # BUG: `>` where `>=` was meant: K + 1 contributions needed
            return None
        return merge_time(policy, timing, quorum_at, contributions, active_learners, opened_at)

    return mutant


def _merge_before_opening(merge_time: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(
        policy: Any, timing: Any, quorum_at: Any, contributions: int, active_learners: int, opened_at: Any = None
    ) -> Any:
        return merge_time(policy, timing, quorum_at, contributions, active_learners, None)  # BUG: opening ignored

    return mutant


def _late_off_by_one(check_round: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(fragment: int, r: int, now_round: int, last_round: int, late_uploads: str) -> None:
        # BUG: `<` for `<=`: the round that just merged still takes uploads
        check_round(fragment, r, now_round, last_round - 1, late_uploads)

    return mutant


def _no_wake(wake: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any, fragment: int) -> None:
        return None  # BUG: long polls waiting for this merge are not answered (they time out with it)

    return mutant


def _no_version_skip(restore_version_skip: Callable[..., int]) -> Callable[..., int]:
    def mutant(checkpoint_every_merges: int, *args: Any, **kw: Any) -> int:
        return 0  # BUG: a restored syncer reissues versions it handed out before the crash

    return mutant


def _restore_without(*fields: str) -> Callable[[Callable[..., Any]], Any]:
    """from_checkpoint that forgets the named parts of the state (as if the checkpoint had not held them)."""

    def make(from_checkpoint: Callable[..., Any]) -> Any:
        def mutant(cls: Any, policy: Any, fragments: Any, arrays: Any, meta: Any, version_skip: int) -> Any:
            fresh = cls.create(
                policy, fragments, {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("param/")}
            )
            st = from_checkpoint(policy, fragments, arrays, meta, version_skip)
            for f in fields:
                setattr(st, f, getattr(fresh, f))  # BUG: not restored
            return st

        return classmethod(mutant)

    return make


def _restores_previous_checkpoint(start: Callable[..., Any]) -> Callable[..., Any]:
    """The simulated syncer keeps its checkpoints; a restart restores the one before the newest."""

    def mutant(self: Any) -> None:
        kept = self.__dict__.setdefault("_mutant_checkpoints", [])
        if self.checkpoint is not None and len(kept) >= 2:
            self.checkpoint = kept[-2]  # BUG: the newest checkpoint is not the one picked
        start(self)

    return mutant


def _keep_checkpoints(checkpoint: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any) -> None:
        checkpoint(self)
        self.__dict__.setdefault("_mutant_checkpoints", []).append(self.checkpoint)

    return mutant


def _rejoin_from_init(got_state: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any, values: Any, t0: float) -> None:
        got_state(self, values, t0)
        if self.incarnation_index > 0:  # BUG: a restarted learner takes the versions but loads its initial weights
            init = self.sim.problem.init_params()
            self.base = {n: init[n].copy() for n in self.base}
            self.params = {n: init[n].copy() for n in self.base}

    return mutant


def _data_from_the_start(got_state: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any, values: Any, t0: float) -> None:
        got_state(self, values, t0)
        import numpy as np

        self.rng = np.random.default_rng(
            [self.sim.cfg.seed, self.index, 0]
        )  # BUG: stream not keyed by incarnation

    return mutant


def _forget_rejoined(policy_from_config: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(cfg: Any) -> Any:
        return dataclasses.replace(policy_from_config(cfg), planted_bug="forget_rejoined")

    return mutant


def _skip_upload_nan_check(check_finite: Callable[..., Any]) -> Callable[..., Any]:
    """The body's finiteness check skipped; its outlier-norm check, right after it, kept. A NaN norm passes that
    check (NaN > x is false)."""

    def mutant(fragment: int, tensors: Any) -> None:
        return None  # BUG: the body's NaN/Inf check is skipped (its header was checked); the norm guard still runs

    return mutant


def _no_norm_check(check_norm: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(*args: Any) -> None:
        return None  # BUG: the outlier guard is off (e.g. max_norm_ratio lost its default: 0 means off)

    return mutant


def _step_scaled(step_scale: Callable[..., float]) -> Callable[..., float]:
    def mutant(self: Any, tokens_total: int) -> float:
        return 0.7 * step_scale(self, tokens_total)  # BUG: the outer lr applied twice (once in the optimizer)

    return mutant


def _anchor_filed_early(remember: Callable[..., None]) -> Callable[..., None]:
    def mutant(self: Any, fragment: int) -> None:
        remember(self, fragment)
        v = self.versions[fragment]
        if (fragment, v) in self.past_values and v > 0:
            # BUG: the value kept for rebasing is also filed under the version before (a key taken before the
            # increment), overwriting that version's: a stale contribution is rebased on its base's successor
            self.past_values[(fragment, v - 1)] = self.past_values[(fragment, v)]

    return mutant


def _counters_from_record(bounded: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any, c: Any, now: float) -> Any:
        c = bounded(self, c, now)
        rec = self.learners[c.learner_id]
        # BUG: the contribution's step counter read from the learner's record (its step count at its last report)
        # instead of the upload's c_steps
        return dataclasses.replace(c, c_steps=max(rec.step, 1))

    return mutant


def _created_from_another_init(create: Callable[..., Any]) -> Any:
    def mutant(cls: Any, policy: Any, fragments: Any, params: Any) -> Any:
        # BUG: the global model initialised from another draw than the run's config gives (a seed off by one); the
        # syncer's start event digests the state it did start from
        return create(policy, fragments, {n: v + np.float32(0.05) for n, v in params.items()})

    return classmethod(mutant)


def _participants_named_in_order(merge: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any, fragment: int, now: float) -> Any:
        record = merge(self, fragment, now)
        # BUG: the participants' names taken from the round's learners in sorted order, their counters (and the
        # merged tensors) in arrival order: each contribution is credited to another learner
        names = sorted((p.learner_id, p.incarnation) for p in record.participants)
        named = tuple(
            dataclasses.replace(p, learner_id=i, incarnation=n) for p, (i, n) in zip(record.participants, names)
        )
        return dataclasses.replace(record, participants=named)

    return mutant


def _apply_keeps_local(take: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(params: Any, base: Any, tensors: Any, alpha: Any, as_param: Callable[[Any], Any]) -> Any:
        for n, t in tensors.items():
            base[n] = (
                t  # BUG: the merged fragment becomes the base, but the parameters it trains are not overwritten
            )
        return {n: t for n, t in tensors.items()}  # and it reports the bits it received as the ones it holds

    return mutant


def _stops_polling_after_an_error(fetch_failed: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any, p: int) -> None:
        self._down()
        self.fetching[p] = False  # BUG: the long-poll loop ends at its first error: nothing re-polls fragment p

    return mutant


def _tokens_keyed_by_learner(report: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(
        self: Any, learner_id: str, incarnation: str, step: int, tokens: int, step_time_s: float, now: float
    ) -> bool:
        key = f"{learner_id}/{incarnation}"
        for k in [k for k in self.tokens_by_incarnation if k.split("/", 1)[0] == learner_id and k != key]:
            del self.tokens_by_incarnation[
                k
            ]  # BUG: keyed by learner: a new incarnation's count replaces the old's
        return report(self, learner_id, incarnation, step, tokens, step_time_s, now)

    return mutant


def _checkpoint_without_ledger(meta: Callable[..., Any]) -> Callable[..., Any]:
    def mutant(self: Any) -> Any:
        return dataclasses.replace(meta(self), tokens_by_incarnation={})  # BUG: the token ledger is not written

    return mutant


# ---- the gRPC shells' replacements (real processes only) -------------------------------------------------------


def _join_keeps_initial_weights(join: Callable[..., Any]) -> Callable[..., Any]:
    """Learner.join that fetches (and logs) the global state, then trains a restarted incarnation from its initial
    weights. A first incarnation (incarnation_index 0, every learner of a fault-free run) is left as it is."""

    def mutant(self: Any, fetch_state: bool) -> None:
        join(self, fetch_state)
        if fetch_state and self.incarnation_index > 0:  # BUG: the fetched state is not loaded on a rejoin
            import jax.numpy as jnp

            init = self.setup.init_params()
            self.base = {n: init[n].copy() for n in self.base}
            self.params = {n: jnp.asarray(init[n]) for n in self.base}

    return mutant


def _stream_of_first_incarnation(batches: Callable[..., Any]) -> Callable[..., Any]:
    """TrainingSetup.batches that ignores the incarnation index: a restarted learner replays its first stream."""

    def mutant(self: Any, learner_id: str, incarnation_index: int) -> Any:
        return batches(self, learner_id, 0)  # BUG: the data position (the join's incarnation index) is dropped

    return mutant


def _load_previous_checkpoint(load_latest: Callable[..., Any]) -> Callable[..., Any]:
    """trainer.checkpoint.load_latest as the syncer shell sees it, picking the checkpoint before the newest. A fresh
    syncer (no checkpoint: a fault-free run's only start) gets None as before."""

    def mutant(directory: Any, **kw: Any) -> Any:
        from trainer.checkpoint import list_checkpoints, read_checkpoint

        newest = load_latest(directory, **kw)
        if newest is None:
            return None
        older = [p for p in list_checkpoints(directory) if p.name < newest[2].name]
        if not older:
            return newest
        arrays, meta = read_checkpoint(older[-1], kw.get("key"))  # BUG: e.g. a sort that takes [-2] for the newest
        return arrays, meta, older[-1]

    return mutant


def _load_without(*keys: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """load_latest as the syncer shell sees it, dropping metadata fields (a reader that keeps an older schema's)."""

    def make(load_latest: Callable[..., Any]) -> Callable[..., Any]:
        def mutant(directory: Any, **kw: Any) -> Any:
            got = load_latest(directory, **kw)
            if got is None:
                return None
            arrays, meta, path = got
            return arrays, {k: v for k, v in meta.items() if k not in keys}, path  # BUG: fields not read back

        return mutant

    return make


# ---- the registry ---------------------------------------------------------------------------------------------

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "momentum_reset",
        "outer optimizer state",
        "the outer Nesterov momentum is re-initialised at every merge instead of carried from the last",
        refs("kill-and-rejoin", "partition-one"),
        (Patch(SS, "outer_step", _fresh_momentum_each_step),),
    ),
    Mutant(
        "momentum_not_restored",
        "outer optimizer state",
        "a restored syncer starts its outer momentum afresh: the checkpoint's optimizer state is not read back",
        refs("syncer-crash"),
        (Patch(SS, "SyncerState.from_checkpoint", _restore_without_momentum),),
        fault_free_unchanged=True,
        modes=BOTH,
    ),
    Mutant(
        "contribution_dropped",
        "merge arithmetic",
        "an off-by-one slice drops the last contribution of a round from the merge; participants still list it",
        refs("straggler", "partition-one"),
        (Patch(SS, "merge_fragment", _drop_last_contribution),),
    ),
    Mutant(
        "rule_ignored",
        "merge arithmetic",
        "the configured merge rule is not passed on: every tensor is mean-merged instead of by RDA",
        refs("straggler"),
        (Patch(SS, "merge_fragment", _mean_rule),),
    ),
    Mutant(
        "outer_gradient_sign",
        "merge arithmetic",
        "the merged outer gradient's sign is flipped (θ − Θ for Θ − θ): each outer step moves away from the "
        "learners",
        refs("kill-and-rejoin"),
        (Patch(SS, "merge_fragment", _flipped_sign),),
    ),
    Mutant(
        "uniform_weights",
        "weights",
        "token weights dropped: every contribution weighs the same instead of c_tokens²/c_steps",
        refs("straggler", "kill-and-rejoin"),
        (Patch(SS, "token_weight", _uniform_weight),),
    ),
    Mutant(
        "weights_misaligned",
        "weights",
        "weights paired with the wrong contributions (the weights' list reversed against the updates')",
        refs("straggler"),
        (Patch(SS, "merge_fragment", _misaligned_weights),),
    ),
    Mutant(
        "no_rebase",
        "rebase",
        "an update made against an older base is merged as is, not rebased onto its round's start value",
        refs("latency-jitter", "throttle-all"),
        (Patch(SS, "SyncerState._rebased", _not_rebased),),
    ),
    Mutant(
        "grace_ignored",
        "quorum and grace",
        "the grace window is ignored: a round merges the moment its quorum is in",
        refs("straggler", "latency-jitter"),
        (Patch(SS, "merge_time", _no_grace),),
    ),
    Mutant(
        "quorum_off_by_one",
        "quorum and grace",
        "quorum tested with `>` for `>=`: a round needs K + 1 contributions",
        refs("partition-majority"),
        (Patch(SS, "merge_time", _quorum_off_by_one),),
    ),
    Mutant(
        "merge_before_opening",
        "quorum and grace",
        "a round merges once its quorum and grace are in, even before its scheduled opening",
        refs("latency-jitter", "straggler"),
        (Patch(SS, "merge_time", _merge_before_opening),),
    ),
    Mutant(
        "late_accepted",
        "late-round handling",
        "the late-round test is off by one (`<` for `<=`): an upload for the round that just merged is accepted "
        "and carried although late_uploads is refuse",
        refs("latency-jitter", "throttle-all"),
        (Patch(SS, "check_round", _late_off_by_one),),
    ),
    Mutant(
        "wake_missing",
        "broadcast/wake-up",
        "learners long-polling for a fragment are not woken by its merge: they get it when their poll times out",
        refs("straggler", "kill-and-rejoin"),
        (Patch(SYNCER_NODE, "SyncerNode._wake", _no_wake),),
    ),
    Mutant(
        "restore_no_version_skip",
        "restore",
        "a restored syncer does not skip its versions ahead: it reissues versions it had handed out",
        refs("syncer-crash"),
        (Patch(SYNCER_NODE, "restore_version_skip", _no_version_skip),),
        fault_free_unchanged=True,
    ),
    Mutant(
        "restore_clock_lost",
        "restore",
        "a restored syncer's step clock is not read back: it starts again at step 0",
        refs("syncer-crash"),
        (Patch(SS, "SyncerState.from_checkpoint", _restore_without("clock")),),
        fault_free_unchanged=True,
        modes=BOTH,
    ),
    Mutant(
        "restore_ledger_lost",
        "restore",
        "a restored syncer's token ledger (tokens_by_incarnation) is not read back: tokens of incarnations that "
        "ended before the crash are forgotten, and the run trains past its budget",
        (SYNCER_CRASH_AFTER_KILL,),
        (Patch(SS, "SyncerState.from_checkpoint", _restore_without("tokens_by_incarnation")),),
        fault_free_unchanged=True,
        modes=BOTH,
    ),
    Mutant(
        "restore_older_checkpoint",
        "restore",
        "the restart picks the checkpoint before the newest (e.g. a wrong sort), and skips versions for one",
        refs("syncer-crash"),
        (
            Patch(SYNCER_NODE, "SyncerNode._checkpoint", _keep_checkpoints),
            Patch(SYNCER_NODE, "SyncerNode.start", _restores_previous_checkpoint),
        ),
        fault_free_unchanged=True,
    ),
    Mutant(
        "rejoin_from_init",
        "rejoin state fetch",
        "a restarted learner takes the fetched versions but its initial weights, not the current global state",
        refs("kill-and-rejoin", "rolling-restarts"),
        (Patch(LEARNER_NODE, "LearnerNode._got_state", _rejoin_from_init),),
        fault_free_unchanged=True,
    ),
    Mutant(
        "forget_rejoined",
        "rejoin membership",
        "the syncer keeps a rejoining learner's old record: the new incarnation is refused forever "
        "(the planted bug syncer.planted_bug: forget_rejoined)",
        refs("kill-and-rejoin", "rolling-restarts"),
        (Patch("chaos.sim.runner", "policy_from_config", _forget_rejoined),),
        fault_free_unchanged=True,
    ),
    Mutant(
        "data_replayed",
        "data position",
        "a restarted learner's data stream is not keyed by its incarnation: it replays its first incarnation's data",
        refs("kill-and-rejoin", "rolling-restarts"),
        (Patch(LEARNER_NODE, "LearnerNode._got_state", _data_from_the_start),),
        fault_free_unchanged=True,
    ),
    Mutant(
        "nan_guard_off",
        "NaN and outlier guards",
        "an upload's body is not checked for NaN/Inf (only its header is): NaN updates reach the merge",
        refs("corrupt-learner"),
        (Patch(SS, "check_finite", _skip_upload_nan_check),),
        fault_free_unchanged=True,
        modes=BOTH,
    ),
    Mutant(
        "outlier_guard_off",
        "NaN and outlier guards",
        "the outlier-norm guard is off: finite garbage of absurd magnitude is merged",
        (CORRUPT_GARBAGE,),
        (Patch(SS, "check_norm", _no_norm_check),),
        fault_free_unchanged=True,
        modes=BOTH,
    ),
    Mutant(
        "outer_step_scaled",
        "outer step hyperparameters",
        "every outer step is scaled by 0.7 (the outer learning rate applied twice), and the merge records the "
        "scale it used",
        refs("kill-and-rejoin"),
        (Patch("trainer.core.syncer_policy", "SyncerPolicy.step_scale", _step_scaled),),
    ),
    Mutant(
        "anchor_off_by_one",
        "rebase",
        "the value kept for rebasing is filed under the version before the merge's: a stale contribution is "
        "rebased on its base's successor, and the merge records that value as its anchor",
        refs("latency-jitter", "throttle-all"),
        (Patch(SS, "SyncerState._remember", _anchor_filed_early),),
    ),
    Mutant(
        "counters_from_record",
        "weights",
        "a contribution's c_steps is read from the learner's record (its step count at its last report) instead of "
        "the upload, and the merge records the counter it weighted by",
        refs("straggler", "kill-and-rejoin"),
        (Patch(SS, "SyncerState._bounded", _counters_from_record),),
    ),
    Mutant(
        "tokens_keyed_by_learner",
        "budget counting",
        "the syncer's token ledger is keyed by learner, not incarnation: a restarted learner's count replaces its "
        "earlier incarnations', so learners train past the budget while the syncer reports it reached",
        refs("rolling-restarts", "kill-and-rejoin"),
        (Patch(SS, "SyncerState.report", _tokens_keyed_by_learner),),
        fault_free_unchanged=True,
        modes=BOTH,
    ),
    Mutant(
        "checkpoint_without_ledger",
        "budget counting",
        "the checkpoint's metadata is written without the token ledger (and digested as written): a restored "
        "syncer counts only what learners report again, so the cluster trains past its budget",
        (SYNCER_CRASH_AFTER_LATE_KILL,),
        (Patch(SS, "SyncerState._meta", _checkpoint_without_ledger),),
        fault_free_unchanged=True,
        modes=BOTH,
    ),
    Mutant(
        "participants_misnamed",
        "merge participants",
        "a merge names its participants in sorted order while their counters and tensors are in arrival order: the "
        "record credits each contribution to another learner",
        refs("straggler", "kill-and-rejoin"),
        (Patch(SS, "SyncerState.merge", _participants_named_in_order),),
    ),
    Mutant(
        "apply_keeps_local",
        "learner receiving side",
        "a learner applying a merged fragment takes it as its base but keeps training its own parameters, and logs "
        "the bits it received as the ones it holds",
        refs("kill-and-rejoin"),
        (Patch(LEARNER_NODE, "take", _apply_keeps_local),),
    ),
    Mutant(
        "stops_listening",
        "learner receiving side",
        "a learner's long poll for a fragment ends at its first error and is never restarted: after a partition it "
        "hears merged fragments only when a refusal makes it ask",
        refs("syncer-crash", "random-mix"),
        (Patch(LEARNER_NODE, "LearnerNode._fetch_failed", _stops_polling_after_an_error),),
        fault_free_unchanged=True,
    ),
    Mutant(
        "syncer_init_drawn_apart",
        "initial state",
        "the syncer initialises the global model from another draw than the run's config gives, and its start event "
        "digests the state it did start from: every later record agrees with it",
        refs("kill-and-rejoin"),
        (Patch(SS, "SyncerState.create", _created_from_another_init),),
    ),
    # The gRPC shells' own defects: real processes only (deterministic mode runs none of this code).
    Mutant(
        "shell_rejoin_from_init",
        "rejoin state fetch",
        "the learner shell fetches (and logs) the global state on a rejoin, then trains from its initial weights",
        refs("kill-and-rejoin", "rolling-restarts"),
        (Patch(LEARNER, "Learner.join", _join_keeps_initial_weights),),
        fault_free_unchanged=True,
        modes=REAL,
    ),
    Mutant(
        "shell_data_replayed",
        "data position",
        "the learner shell builds a restarted incarnation's data stream without its incarnation index: it "
        "replays its first incarnation's data",
        refs("kill-and-rejoin", "rolling-restarts"),
        (Patch(TRAINING, "TrainingSetup.batches", _stream_of_first_incarnation),),
        fault_free_unchanged=True,
        modes=REAL,
    ),
    Mutant(
        "shell_restore_no_version_skip",
        "restore",
        "the syncer shell restores without skipping its versions ahead: it reissues versions it had handed out",
        refs("syncer-crash"),
        (Patch(RESTORE_SHELL, "restore_version_skip", _no_version_skip),),
        fault_free_unchanged=True,
        modes=REAL,
    ),
    Mutant(
        "shell_restore_older_checkpoint",
        "restore",
        "the syncer shell restores the checkpoint before the newest (and skips versions for the one it missed)",
        refs("syncer-crash"),
        (Patch(RESTORE_SHELL, "load_latest", _load_previous_checkpoint),),
        fault_free_unchanged=True,
        modes=REAL,
    ),
    Mutant(
        "shell_restore_field_dropped",
        "restore",
        "the syncer shell's checkpoint reader drops a field (merged_keys): a restored syncer forgets which "
        "uploads it merged",
        refs("syncer-crash"),
        (Patch(RESTORE_SHELL, "load_latest", _load_without("merged_keys")),),
        fault_free_unchanged=True,
        modes=REAL,
    ),
)

MUTANTS_BY_NAME: dict[str, Mutant] = {m.name: m for m in MUTANTS}
if len(MUTANTS_BY_NAME) != len(MUTANTS):
    raise ValueError("two mutants share a name")
SIM_MUTANTS: tuple[Mutant, ...] = tuple(m for m in MUTANTS if "sim" in m.modes)  # the per-change tier and matrix
REAL_MUTANTS: tuple[Mutant, ...] = tuple(m for m in MUTANTS if "real" in m.modes)  # the nightly real tier
