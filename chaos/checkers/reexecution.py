"""Whole-run re-execution: from the run's recorded uploads and its config alone, replay every merge in order with the
independent numpy reference and reach the final checkpoint's parameters and optimizer state.

The merge audit recomputes each kept merge from the start value, optimizer state and anchors the syncer recorded for
it, and chains those by digest. This replay takes none of them: it starts from the initial parameters the run's
config gives (the runner supplies them), and for each merge in the history's order takes only the uploads (the
kept file's ``upload/<i>``, which the audit checks against the event's digests) and the participants' counters
(which the audit checks against the learners' own logs); the start value, each contribution's anchor (the replayed
value of its base version) and the optimizer state are the replay's own. A syncer restart restores the replayed
state of the checkpoint it restored (``restored_from_merges``; a fresh start: the initial state); the versions are
the restore's. At the end the replayed state at the last checkpoint must be the checkpoint's arrays, float32
round-off apart.

It needs every merge kept whole (deterministic mode keeps all; a real run with ``syncer.audit_keep_fraction: 1``)
and the initial parameters and final checkpoint; without them it does not run, and says why. Data-parallel's AdamW
step is not recomputed, so neither is its run.

Each merge's result is rounded to float32 as the syncer stores it, so round-off does not build up along the run
(measured: the replayed final state within a few round-off units of the checkpoint's, tests/unit/test_reexecution.py).

    >>> import numpy as np
    >>> rr = Reexecutor({"w": np.zeros(2, np.float32)}, lr=0.5, momentum=0.0, nesterov=False, rule="mean",
    ...               mean_tensors=(), weighting="uniform")
    >>> rr.start([0], fresh=True)
    >>> rr.merge(0, 1, ["w"], [{"w": np.array([2.0, 4.0])}], [(8, 8)], [0])
    >>> rr.params["w"].tolist()                       # 0 − 0.5 · 1 · [2, 4]
    [-1.0, -2.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from chaos.checkers import merge_reference as ref
from chaos.checkers.audit_inputs import Key, upload_key
from chaos.checkers.base import MergeFacts
from chaos.checkers.learner_replay import InnerSteps, replay_learners
from chaos.history import History
from chaos.records import JsonObject
from trainer import events as ev

PARAM, OPT = "param/", "opt/"  # a checkpoint's array names (trainer/core/checkpoint_codec.py)


@dataclass
class Reexecutor:
    """The replayed syncer: parameters, outer momentum and every version's value, from the initial parameters."""

    initial: Mapping[str, np.ndarray]
    lr: float
    momentum: float
    nesterov: bool
    rule: str
    mean_tensors: tuple[str, ...]
    weighting: str
    rebases: bool = (
        True  # a contribution from an older base is rebased (off: rounds on arrival, ``outer_gradient: base``)
    )
    params: dict[str, np.ndarray] = field(default_factory=dict)
    moment: dict[str, np.ndarray] = field(default_factory=dict)
    values: dict[tuple[int, int], dict[str, np.ndarray]] = field(default_factory=dict)
    snapshots: dict[int, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = field(default_factory=dict)

    def start(
        self, versions: Sequence[int], fresh: bool, restored_from: int = -1, names: Sequence[Sequence[str]] = ()
    ) -> None:
        """A syncer (re)start at ``versions``: the initial state when fresh, else the snapshot of the checkpoint at
        ``restored_from`` merges; each fragment's value (``names``: its tensors) is known at its version."""
        if fresh:
            self.params = {n: np.asarray(v, np.float32).copy() for n, v in self.initial.items()}
            self.moment = {n: np.zeros_like(v) for n, v in self.params.items()} if self.momentum else {}
        else:
            params, moment = self.snapshots[restored_from]
            self.params, self.moment = dict(params), dict(moment)
        for p, fragment in enumerate(names):
            self.values[(p, versions[p])] = {n: self.params[n] for n in fragment}

    def checkpoint(self, merges_total: int) -> None:
        self.snapshots[merges_total] = (dict(self.params), dict(self.moment))

    def merge(
        self,
        fragment: int,
        version: int,
        names: Sequence[str],
        uploads: Sequence[Mapping[str, np.ndarray]],
        counters: Sequence[tuple[int, int]],
        base_versions: Sequence[int],
    ) -> str | None:
        """Replay one merge making ``version`` of ``fragment`` (``names``: its tensors); None, or why it cannot."""
        start = {n: self.params[n] for n in names}
        anchors: list[Mapping[str, np.ndarray] | None] = []
        for b in base_versions:
            if b == version - 1 or not self.rebases:
                anchors.append(None)
            elif (fragment, b) in self.values:
                anchors.append(self.values[(fragment, b)])
            else:
                return f"no replayed value of fragment {fragment} v{b} to rebase on"
        delta = ref.merged_delta(uploads, anchors, start, counters, self.rule, self.mean_tensors, self.weighting)
        before = {f"momentum/{n}": self.moment[n] for n in names} if self.momentum else {}
        result, after = ref.outer_step(
            start, before, delta, lr=self.lr, momentum=self.momentum, nesterov=self.nesterov, scale=1.0
        )
        for n in names:  # stored as the syncer stores them: float32
            self.params[n] = result[n].astype(np.float32)
            if self.momentum:
                self.moment[n] = after[f"momentum/{n}"].astype(np.float32)
        self.values[(fragment, version)] = {n: self.params[n] for n in names}
        return None


def checkpoint_error(
    params: Mapping[str, np.ndarray],
    moment: Mapping[str, np.ndarray],
    checkpoint: Mapping[str, np.ndarray],
    fragments: Sequence[Sequence[str]],
) -> float:
    """How far a checkpoint's parameters and outer momentum (``moment`` empty: none) are from the replayed ones, in
    float32 round-off units (:func:`~chaos.checkers.merge_reference.max_error`). Its optimizer leaves are
    ``opt/<fragment>/<i>``: the i-th of the fragment's tensors in name order (the momentum's leaves, as the outer
    optimizer's state flattens)."""
    err = ref.max_error(params, {k[len(PARAM) :]: v for k, v in checkpoint.items() if k.startswith(PARAM)})
    if moment:
        held = {
            n: checkpoint.get(f"{OPT}{p}/{i}", np.full(1, np.nan))
            for p, names in enumerate(fragments)
            for i, n in enumerate(sorted(names))
        }
        err = max(err, ref.max_error(moment, held))
    return err


def reexecute_run(
    history: History,
    facts: MergeFacts,
    audit_files: Mapping[str, Mapping[str, np.ndarray]],
    initial: Mapping[str, np.ndarray],
    final_checkpoint: Mapping[str, np.ndarray],
    roundoff: float,
    inner_steps: InnerSteps | None = None,
) -> tuple[JsonObject, list[str]]:
    """Replay the run (module docstring): its evidence, and what is wrong (empty: the replay reached the final
    checkpoint). Whether it ran at all is the evidence's ``ran``. With ``inner_steps``, the learners are replayed
    against the replayed chain too (:mod:`chaos.checkers.learner_replay`: the evidence's ``learners``)."""
    merges = history.of(ev.Merge)
    checkpoints = history.of(ev.Checkpoint)
    unkept = {"ran": False, "why": "not every merge was kept whole (syncer.audit_keep_fraction < 1)"}
    why = (
        "data-parallel's AdamW step is not recomputed"
        if facts.adamw
        else "no initial parameters from the config were given"
        if not initial
        else "no final checkpoint was given"
        if not final_checkpoint or not checkpoints
        else ""
    )
    if why:
        return {"ran": False, "why": why}, []
    if any(m.audit is None or not m.audit.file for m in merges):
        return unkept, []
    a = facts.algorithm
    rr = Reexecutor(
        initial, a.outer_lr, a.outer_momentum, a.nesterov, a.merge_rule, facts.mean_tensors, a.weighting, a.rebases
    )
    names: dict[int, list[str]] = {}
    for m in merges:  # each fragment's tensors, from its first kept file (each file is read once more below)
        assert m.audit is not None
        if m.fragment not in names:
            first = audit_files.get(m.audit.file)
            if first is None:
                return unkept, []
            names[m.fragment] = sorted(ref.part(first, "base"))
    fragments = [names.get(p, []) for p in range(max(names, default=-1) + 1)]
    problems: list[str] = []
    replayed = 0
    made: dict[tuple[int, int], list[tuple[float, dict[str, np.ndarray]]]] = {}  # each value the replay made, when
    merged: list[tuple[Key, dict[str, np.ndarray]]] = []  # the merged uploads, each with the learner's key for it
    for e in history.of(ev.SyncerStart, ev.Merge, ev.Checkpoint):
        if isinstance(e, ev.SyncerStart):
            fresh = e.restored_from_merges < 0
            if not fresh and e.restored_from_merges not in rr.snapshots:  # killed between its file and its event
                return {
                    "ran": False,
                    "why": f"the syncer restored the checkpoint of merge {e.restored_from_merges}, which no event names",
                }, []
            rr.start(e.versions, fresh, e.restored_from_merges, fragments)
            for p, v in enumerate(e.versions[: len(fragments)]):
                made.setdefault((p, v), []).append((e.ts, rr.values[(p, v)]))
        elif isinstance(e, ev.Checkpoint):
            rr.checkpoint(e.merges_total)
        else:
            assert e.audit is not None
            arrays = audit_files.get(e.audit.file)
            if arrays is None:  # gone or unreadable (the audit names it)
                return unkept, []
            uploads = [ref.part(arrays, f"upload/{i}") for i in range(len(e.participants))]
            wrong = rr.merge(
                e.fragment,
                e.version,
                names[e.fragment],
                uploads,
                [(p.c_tokens, p.c_steps) for p in e.participants],
                [p.base_version for p in e.participants],
            )
            if wrong is not None:
                problems.append(f"merge {e.merges_total} (fragment {e.fragment} → v{e.version}): {wrong}")
                break
            replayed += 1
            made.setdefault((e.fragment, e.version), []).append((e.ts, rr.values[(e.fragment, e.version)]))
            for i, c in enumerate(e.participants):
                key = upload_key(c.learner_id, c.incarnation, e.fragment, c.base_version, c.round, a.clocked)
                merged.append((key, uploads[i]))
    last = checkpoints[-1].merges_total
    evidence: JsonObject = {"ran": True, "merges": replayed, "checkpoint_merges": last}
    if problems:
        return evidence, problems
    evidence["learners"], learner_problems = replay_learners(
        history.events, inner_steps, a, dict(enumerate(fragments)), made, merged
    )
    problems += learner_problems
    err = checkpoint_error(*rr.snapshots[last], final_checkpoint, fragments)
    evidence["error_roundoff_units"] = round(err, 3) if np.isfinite(err) else "inf"
    if err > roundoff:
        problems.append(
            f"re-executing all {replayed} merges from the config's initial parameters and the recorded uploads does not "
            f"reach the final checkpoint (merge {last}): its parameters or outer momentum differ by {err:.3g} "
            "round-off units"
        )
    return evidence, problems
