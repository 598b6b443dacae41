"""Learner re-execution: replay each learner's inner steps from the values the chain says it received, and check
that every upload of it that was merged is what the algorithm makes of them.

A learner's ``apply`` event digests the fragment it holds afterwards, so a learner that applies a merged fragment
wrongly and logs the bits it received passes every check that reads its log. Its uploads are what it did: each is
``Θ_base − θ``, and ``θ`` is the trajectory of inner steps from the last value applied. So this replay takes from
the learner's log only what it cannot get wrong without the replay noticing: when it fetched the state and which
versions (the values are the whole-run re-execution's, :mod:`chaos.checkers.reexecution`, not the learner's), the
step at which each sync started and each merged fragment was applied, and the progress it heard (``progress_heard``: the inner learning
rate's schedule reads it). Between them it steps the run's own inner step (``InnerSteps``: the runner supplies it,
with the learner's data stream) and applies each fragment by the algorithm's rule — θ becomes Θ, or with α-mixing
α·θ + (1 − α)·Θ — written here, not borrowed from the learner. Each merged upload (the kept merge file's
``upload/<i>``) must equal the replay's ``Θ_base − θ`` sent through the wire format, to float32 round-off at the
fragment's scale plus one quantum of the format.

Only deterministic mode supplies the inner step: real runs' JAX steps would cost a second training run, and which
step first reads a newly heard progress races with the step loop there. Learners started corrupt by a fault are not
replayed (their uploads are wrong on purpose); nor are data-parallel's gradients.

    >>> import numpy as np
    >>> from trainer import events as ev
    >>> halve = lambda learner, k: (lambda params, progress: {n: v * 0.5 for n, v in params.items()})
    >>> log = [ev.LearnerStart(ts=0, source="a", learner_id="a", learner_incarnation="i", pid=1, syncer="s",
    ...                        config_hash=""),
    ...        ev.LearnerJoin(ts=1, source="a", learner_incarnation="i", incarnation_index=0, versions=[0],
    ...                       syncer_incarnation="s"),
    ...        ev.StateFetch(ts=2, source="a", versions=[0], seconds=0.1),
    ...        ev.SyncStartEvent(ts=3, source="a", fragment=0, base_version=0, c_steps=1, c_tokens=8, step=1, round=0)]
    >>> r = LearnerReplay(halve, {0: ["w"]}, alpha=None, wire_format="float32", clocked=False,
    ...                   value=lambda p, v, ts, d: {"w": np.array([4.0], np.float32)})
    >>> r.run(log)
    >>> [u.tensors["w"].tolist() for u in r.expected[("a", "i", 0, 0, 0)]]   # Θ − θ = 4 − 2
    [[2.0]]
    >>> r.judge([(("a", "i", 0, 0, 0), {"w": np.array([1.0], np.float32)})])
    ['a (incarnation i) fragment 0 from v0, synced at step 1: the upload differs from its re-executed inner steps by 1 (allowed 4.58e-05): it did not train from the values it was sent, or did not apply them as the algorithm says']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from chaos.checkers.audit_inputs import Key, upload_key
from chaos.checkers.merge_reference import F32_EPS
from chaos.records import JsonObject
from trainer import events as ev
from trainer.core.algorithm import Algorithm
from trainer.core.audit import digest
from trainer.core.wire_formats import roundtrip

Tensors = dict[str, np.ndarray]
# (params, the progress the learner heard) -> its params after one inner step, drawing its data stream.
Stepper = Callable[[Tensors, float], Tensors]
# (learner id, incarnation index) -> its step function, its data stream at the start (as a state fetch starts it).
InnerSteps = Callable[[str, int], Stepper]
# (fragment, version, time, the learner's digest of it) -> the value of that version the chain had made by then
# (None: it had made none).
Values = Callable[[int, int, float, str], Mapping[str, np.ndarray] | None]

ROUNDOFF = 64.0  # float32 round-off units at the fragment's scale a replayed upload may differ by
QUANTUM = {"float32": 0.0, "bfloat16": 2.0**-7, "int8": 1 / 127, "int4": 1 / 7}  # one step of the format, × max|x|

# What the replay takes on the learners' word (a wrong one shows as a mismatch, except a wrong record of all three
# alike with behaviour that follows it): the steps its syncs and applies came at, the progress it heard, its data key.
TRUSTED = ["sync and apply steps", "progress heard", "incarnation index (data stream)"]
_LOGGED = (ev.LearnerStart, ev.LearnerJoin, ev.StateFetch, ev.ProgressHeard, ev.SyncStartEvent, ev.Apply)


@dataclass(frozen=True)
class Replayed:
    """A logged upload as the replay makes it: its tensors, the parameters' scale at the sync (max |Θ_base| + max
    |θ|: its round-off's), and how to name it."""

    tensors: Tensors
    scale: float
    where: str


@dataclass
class _Process:
    """One learner process being replayed."""

    incarnation: str
    corrupt: bool
    index: int = 0  # the incarnation index of its latest join (its data stream's key)
    progress: float = 0.0
    step: int = 0
    stepper: Stepper | None = None
    params: Tensors = field(default_factory=dict)
    base: Tensors = field(default_factory=dict)
    lost: str = ""  # why it cannot be replayed further (empty: it can)

    def advance(self, step: int) -> None:
        while self.step < step and self.stepper is not None:
            self.params = self.stepper(self.params, self.progress)
            self.step += 1


@dataclass
class LearnerReplay:
    """Replays the learners' logs (module docstring); ``expected`` holds each logged upload's replayed value."""

    steps: InnerSteps
    fragments: Mapping[int, Sequence[str]]
    alpha: float | None
    wire_format: str
    clocked: bool
    value: Values
    # Per upload key, the logged uploads' replays (rounds on arrival: a learner's uploads from one base share a key).
    expected: dict[Key, list[Replayed]] = field(default_factory=dict)
    worst: float = 0.0  # the largest difference of a merged upload from its replay, in units of what is allowed
    unreplayed: dict[str, int] = field(default_factory=dict)  # why processes were not (fully) replayed: how many

    def run(self, events: Iterable[ev.Event]) -> None:
        procs: dict[str, _Process] = {}
        for e in events:
            if isinstance(e, ev.LearnerStart):
                self._end(procs.get(e.source))
                procs[e.source] = _Process(e.learner_incarnation, corrupt=bool(e.corrupt))
                continue
            p = procs.get(e.source)
            if p is None or p.corrupt or p.lost:
                continue
            if isinstance(e, ev.LearnerJoin):
                p.index = e.incarnation_index
            elif isinstance(e, ev.ProgressHeard):  # steps up to e.step took the old progress (none yet: none)
                p.advance(e.step)
                p.progress = max(p.progress, e.progress)
            elif isinstance(e, ev.StateFetch):
                self._fetched(p, e)
            elif p.stepper is None:
                continue
            elif isinstance(e, ev.SyncStartEvent):
                p.advance(e.step)
                key = upload_key(e.source, p.incarnation, e.fragment, e.base_version, e.round, self.clocked)
                names = self.fragments[e.fragment]
                self.expected.setdefault(key, []).append(
                    Replayed(
                        {n: p.base[n] - p.params[n] for n in names},
                        max(_max_abs(p.base[n]) + _max_abs(p.params[n]) for n in names),
                        f"{e.source} (incarnation {p.incarnation}) fragment {e.fragment} from v{e.base_version}, "
                        f"synced at step {e.step}",
                    )
                )
            elif isinstance(e, ev.Apply):
                p.advance(e.step)
                got = self.value(e.fragment, e.version, e.ts, e.digest)
                if got is None:
                    p.lost = f"applied a version the replayed chain never made ({e.source}: fragment {e.fragment} v{e.version})"
                    continue
                for n in self.fragments[e.fragment]:  # the algorithm's rule, written here (not trainer's take())
                    theta = np.asarray(got[n], np.float32).copy()
                    p.base[n] = theta
                    p.params[n] = (
                        theta.copy() if self.alpha is None else self.alpha * p.params[n] + (1 - self.alpha) * theta
                    )
        for p in procs.values():
            self._end(p)

    def _fetched(self, p: _Process, e: ev.StateFetch) -> None:
        params: Tensors = {}
        for f, v in enumerate(e.versions):
            got = self.value(f, v, e.ts, e.digests[f] if f < len(e.digests) else "")
            if got is None:
                p.lost = "fetched a version the replayed chain never made"
                return
            params.update({n: np.asarray(got[n], np.float32).copy() for n in self.fragments[f]})
        p.params, p.base = params, {n: t.copy() for n, t in params.items()}
        p.stepper = self.steps(e.source, p.index)

    def _end(self, p: _Process | None) -> None:
        if p is not None and (p.corrupt or p.lost):
            why = "started corrupt by a fault" if p.corrupt else p.lost
            self.unreplayed[why] = self.unreplayed.get(why, 0) + 1

    def judge(self, merged: Iterable[tuple[Key, Mapping[str, np.ndarray]]]) -> list[str]:
        """What is wrong with the merged uploads (``merged``: each with its upload key) against their replays: each must
        match one replay of its key (one, unless rounds are on arrival)."""
        problems: list[str] = []
        for key, got in merged:
            judged = [self._differs(r, got) for r in self.expected.get(key, [])]
            if not judged:
                continue
            ratio, problem = min(judged, key=lambda j: j[0])
            self.worst = max(self.worst, ratio)
            if problem:
                problems.append(problem)
        return problems

    def _differs(self, r: Replayed, got: Mapping[str, np.ndarray]) -> tuple[float, str]:
        """How far ``got`` is from the replay ``r`` in units of what is allowed — round-off at the parameters' scale
        (the replayed chain's values differ from the syncer's by that much) plus one step of the wire format — and the
        problem when over (empty: none)."""
        worst = 0.0
        for n, t in r.tensors.items():
            w = roundtrip(t, self.wire_format)
            g = np.asarray(got.get(n, np.full(1, np.nan)), np.float64)
            if g.shape != w.shape:
                return float("inf"), f"{r.where}: tensor {n!r} has shape {g.shape}, not {w.shape}"
            diff = _max_abs(g - w) if np.all(np.isfinite(g)) else float("inf")
            allowed = ROUNDOFF * F32_EPS * r.scale + QUANTUM[self.wire_format] * _max_abs(w)
            ratio = diff / allowed if allowed > 0 else 0.0 if diff == 0 else float("inf")
            if not ratio <= 1:
                return ratio, (
                    f"{r.where}: the upload differs from its re-executed inner steps by {diff:.3g} (allowed "
                    f"{allowed:.3g}): it did not train from the values it was sent, or did not apply them as the "
                    "algorithm says"
                )
            worst = max(worst, ratio)
        return worst, ""


def _max_abs(x: np.ndarray) -> float:
    return float(np.max(np.abs(x), initial=0.0))


def replay_learners(
    history: Iterable[ev.Event],
    steps: InnerSteps | None,
    algorithm: Algorithm,
    fragments: Mapping[int, Sequence[str]],
    made: Mapping[tuple[int, int], Sequence[tuple[float, Mapping[str, np.ndarray]]]],
    merged: Sequence[tuple[Key, Mapping[str, np.ndarray]]],
) -> tuple[JsonObject, list[str]]:
    """Replay every learner (module docstring) against the chain's values ``made`` — per (fragment, version), each
    time the replayed syncer made it and the value — and judge the ``merged`` uploads: the evidence, the problems."""
    if steps is None:
        return {"ran": False, "why": "no inner step was given (real runs' JAX steps are not re-executed)"}, []

    def value(f: int, v: int, ts: float, held: str) -> Mapping[str, np.ndarray] | None:
        """The value made before ``ts``; where a syncer restart made the version again, the one the learner's digest
        names (when the replay is bit-exact), else the latest."""
        made_by = [t for t in made.get((f, v), ()) if t[0] <= ts]
        if len(made_by) > 1:
            named = [m for m in made_by if digest(dict(m[1])) == held]
            made_by = named or made_by
        return made_by[-1][1] if made_by else None

    r = LearnerReplay(steps, fragments, algorithm.mix_alpha, algorithm.wire_format, algorithm.clocked, value)
    r.run(e for e in history if isinstance(e, _LOGGED))
    problems = r.judge(merged)
    compared = sum(1 for k, _ in merged if k in r.expected)
    evidence: JsonObject = {
        "ran": True,
        "uploads": compared,
        "of_merged": len(merged),
        "from_the_learners": TRUSTED,
    }
    evidence["worst_of_allowed"] = round(r.worst, 4) if np.isfinite(r.worst) else "inf"
    return {**evidence, "not_replayed": dict(r.unreplayed)}, problems
