"""Where the merge audit takes each merge's inputs from: sources the syncer does not control.

A syncer that is wrong and writes down what it did would pass a reference fed from its own records. So, per merge:

- the outer step's hyperparameters (learning rate, momentum, Nesterov, merge rule per tensor, weighting) come from the
  run's resolved config (:class:`~chaos.checkers.base.MergeFacts`), and the step has no scale of its own (only
  data-parallel's AdamW decays, and the reference does not recompute that step): see :func:`scale_problem`;
- each contribution's anchor — the value it was rebased from — must be the value the digest chain says its fragment
  had at the contribution's base version (:func:`anchor_problem`);
- each participant's counters (c_steps, c_tokens) must be what its learner logged sending for that upload
  (``sync_start``), or the documented cap of them (c_steps lowered to what time allows, c_tokens = c_steps × tokens
  per step: trainer.core.syncer_state ``_bounded``): :func:`counters_problem`;
- each participant must be an upload its learner logged sending and was not told was refused
  (:func:`learner_uploads`), merged once (a merge a syncer restart undid aside: :class:`MergedOnce`).

Where a learner wrote nothing for an upload (it died before writing, or its log is not part of the history), that
input is taken on trust and the evidence names it (:class:`Trust`).

    >>> sent = Sent(c_steps=8, c_tokens=512, refused="")
    >>> counters_problem(8, 512, sent, 64) is None, counters_problem(5, 320, sent, 64) is None   # as sent; capped
    (True, True)
    >>> counters_problem(11, 512, sent, 64)
    'counters c_steps 11, c_tokens 512 where its learner sent c_steps 8, c_tokens 512 (only a cap may change them: fewer steps, c_tokens = c_steps × 64)'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from chaos.history import History
from trainer import events as ev
from trainer.core.checkpoint_meta import Key  # one upload: learner, incarnation, fragment, base version, round
from trainer.core.replies import UNREACHABLE  # a learner's sync_result when no answer came

SHOWN = 5


@dataclass(frozen=True)
class Sent:
    """What a learner logged of one of its uploads: the counters it sent, and the refusal it was told ("" when it
    was told the upload was accepted, or no answer came)."""

    c_steps: int
    c_tokens: int
    refused: str


def upload_key(learner: str, incarnation: str, fragment: int, base_version: int, rnd: int, clocked: bool) -> Key:
    """An upload's key; arrival rounds are not the learner's to name (the syncer counts them all as round 0)."""
    return (learner, incarnation, fragment, base_version, rnd if clocked else 0)


def learner_syncs(h: History) -> Iterator[tuple[str, ev.SyncStartEvent | ev.SyncResult]]:
    """The learners' ``sync_start`` and ``sync_result`` events in time order, each with its learner's incarnation:
    the one its latest ``learner_start`` named (events before any are left out)."""
    incarnation: dict[str, str] = {}
    for e in h.of(ev.LearnerStart, ev.SyncStartEvent, ev.SyncResult):
        if isinstance(e, ev.LearnerStart):
            incarnation[e.learner_id] = e.learner_incarnation
        elif e.source in incarnation:
            yield incarnation[e.source], e


def learner_uploads(h: History, clocked: bool) -> dict[Key, Sent]:
    """Every upload the learners logged (``sync_start``), by key, with what they were told (``sync_result``)."""
    out: dict[Key, Sent] = {}
    for inc, e in learner_syncs(h):
        key = upload_key(e.source, inc, e.fragment, e.base_version, e.round, clocked)
        if isinstance(e, ev.SyncStartEvent):
            out[key] = Sent(e.c_steps, e.c_tokens, "")
        elif key in out and not e.accepted and e.reason != UNREACHABLE:
            out[key] = Sent(out[key].c_steps, out[key].c_tokens, e.reason)
    return out


def counters_problem(c_steps: int, c_tokens: int, sent: Sent, tokens_per_step: int) -> str | None:
    """What is wrong with a participant's counters against what its learner sent (None: they are, or are the
    documented cap: fewer steps, and c_tokens = c_steps × tokens per step — or no more tokens where that is unknown)."""
    if (c_steps, c_tokens) == (sent.c_steps, sent.c_tokens):
        return None
    per = tokens_per_step
    if c_steps < sent.c_steps and (c_tokens == c_steps * per if per else c_tokens <= sent.c_tokens):
        return None
    rule = f"c_tokens = c_steps × {per}" if per else "no more tokens"
    return (
        f"counters c_steps {c_steps}, c_tokens {c_tokens} where its learner sent c_steps {sent.c_steps}, "
        f"c_tokens {sent.c_tokens} (only a cap may change them: fewer steps, {rule})"
    )


def anchor_problem(
    anchor: str | None,
    base_version: int,
    start_version: int,
    rebases: bool,
    chain: Mapping[tuple[int, int], set[str]],
    fragment: int,
) -> tuple[str | None, bool]:
    """What is wrong with the anchor a contribution against ``base_version`` was rebased from, for a merge starting
    at ``start_version`` (None: nothing); and whether the chain knew the base's value (False: taken on trust)."""
    if anchor is None:
        stale = rebases and base_version != start_version
        return (
            f"its base v{base_version} is not the round's start v{start_version}, and it was not rebased"
            if stale
            else None
        ), True
    known = chain.get((fragment, base_version))
    if known is None:
        return None, False
    if anchor not in known:
        return (
            f"rebased on an anchor other than fragment {fragment}'s value at its base v{base_version} in the digest "
            "chain",
            True,
        )
    return None, True


@dataclass
class MergedOnce:
    """Which merge took each upload: an upload merges once, unless a syncer restart undid the merge that took it (a
    restore forgets the merges after its checkpoint; a fresh restart, all)."""

    by: dict[Key, int] = field(default_factory=dict)

    def restart(self, restored_from_merges: int) -> None:
        self.by = {k: n for k, n in self.by.items() if n <= restored_from_merges}

    def take(self, key: Key, merges_total: int) -> int | None:
        """Record that merge ``merges_total`` took ``key``; the merge that had taken it already, if one had."""
        before = self.by.get(key)
        self.by[key] = merges_total
        return before


@dataclass
class Trust:
    """Per audited input, how many merges' worth were derived independently and which were taken on trust."""

    derived: Counter = field(default_factory=Counter)
    trusted: Counter = field(default_factory=Counter)
    merges_trusting: int = 0
    first: list[str] = field(default_factory=list)

    def note(self, merge: str, derived: list[str], trusted: list[str]) -> None:
        self.derived.update(derived)
        self.trusted.update(trusted)
        if trusted:
            self.merges_trusting += 1
            if len(self.first) < SHOWN:
                self.first.append(f"{merge}: {', '.join(trusted)}")

    def evidence(self) -> dict[str, object]:
        return {
            "hyperparameters": "the run's resolved config",
            "derived": dict(self.derived),
            "on_trust": dict(self.trusted),
            "merges_with_inputs_on_trust": self.merges_trusting,
            "first_on_trust": self.first,
        }


def merge_inputs(
    m: ev.Merge,
    sent: Mapping[Key, Sent],
    chain: Mapping[tuple[int, int], set[str]],
    *,
    clocked: bool,
    rebases: bool,
    tokens_per_step: int,
    trust: Trust,
    once: MergedOnce,
    logged: frozenset[tuple[str, str]] = frozenset(),
) -> list[str]:
    """What is wrong with ``m``'s inputs against the learners' records and the digest chain (``chain``: the values
    each (fragment, version) had, as of this merge); tallies what was derived and what taken on trust. ``logged``:
    the (learner, incarnation) pairs whose own log is in the history (an upload of one of them that no
    ``sync_start`` names was never sent)."""
    assert m.audit is not None
    problems: list[str] = []
    derived: list[str] = []
    trusted: list[str] = []
    start = m.version - 1  # one merge, one version: the fragment's version before it
    for i, p in enumerate(m.participants):
        who = f"{p.learner_id}'s contribution (base v{p.base_version}, round {p.round})"
        key = upload_key(p.learner_id, p.incarnation, m.fragment, p.base_version, p.round, clocked)
        s = sent.get(key)
        earlier = once.take(key, m.merges_total)
        if earlier is not None:
            problems.append(f"merged {who} again: merge {earlier} had merged that upload (an upload merges once)")
        if s is None and (p.learner_id, p.incarnation) in logged:
            problems.append(f"merged {who}, which its learner's log shows it never sent")
        elif s is None:
            trusted += [f"{p.learner_id}'s participation and counters (no log of {p.incarnation})"]
        else:
            derived += ["participants", "counters"]
            if s.refused:
                problems.append(f"merged {who}, which its learner was told was refused ({s.refused})")
            wrong = counters_problem(p.c_steps, p.c_tokens, s, tokens_per_step)
            if wrong is not None:
                problems.append(f"weighted {who} by {wrong}")
        anchor = m.audit.anchors[i] if i < len(m.audit.anchors) else None
        wrong, known = anchor_problem(anchor, p.base_version, start, rebases, chain, m.fragment)
        if known:
            derived.append("anchors")
        else:
            trusted.append(f"{p.learner_id}'s anchor (v{p.base_version} not in the chain)")
        if wrong is not None:
            problems.append(f"{who}: {wrong}")
    trust.note(f"merge {m.merges_total} (fragment {m.fragment} → v{m.version})", derived, trusted)
    return problems


def scale_problem(m: ev.Merge) -> str | None:
    """The Nesterov outer step has no scale of its own: the config's lr and momentum are all of it."""
    assert m.audit is not None
    if m.audit.scale != 1.0:
        return (
            f"it recorded an outer-step scale of {m.audit.scale:g}; the run's Nesterov step has none (its learning "
            "rate and momentum are the config's)"
        )
    return None
