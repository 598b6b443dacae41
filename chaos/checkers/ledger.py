"""The token ledger: every token a learner sent for merging is accounted for, exactly, and the result is fixed at
the budget.

Tokens here are contribution tokens, contributions' ``c_tokens`` (trainer.metrics; one for fragment p stands for the tokens trained since the
learner last received p). Three books must balance:

- **the syncer's**: each upload it accepted (``upload``, not a duplicate) ends in exactly one bin — *merged* (in
  the next merge of its fragment; any part of its count the syncer capped by time is *capped*), *superseded* (the
  same learner's newer upload for that fragment replaced it in the pending round), *lost with the syncer* (pending
  when the syncer restarted; a merge the restored checkpoint did not hold counts there too), *dropped by a refused
  merge* (a merge refused as non-finite), or *in flight at the end*. An accepted upload left out of its fragment's
  merge, or a participant the syncer never had pending, is unaccounted: a FAIL naming it.
- **the learners' against the syncer's**: each upload a learner counts as accepted (``sync_result``) is one the
  syncer accepted with the same counters; each refusal it was told has its ``reject`` with that reason; each upload
  the syncer accepted was sent by that learner incarnation (``sync_start``).
- **the budget**: the result (``finished``) is fixed with tokens in [budget, budget + max(one round of every learner,
  a quarter of the budget)] by the syncer's count, and that count is borne out by the learners' own (their ``step``
  events, :mod:`chaos.checkers.trained`): no more than they had trained, and no more than one round below what they
  could have reported by then — trained tokens both, the budget's unit, not the contribution tokens above;
- **the data** (learners' ``step`` events): each incarnation trains its own stream — the config's seed, the
  learner's data key, the incarnation index the syncer gave it — from its start, one batch a step; no stream is
  trained by two incarnations or two learners.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from chaos.checkers.audit_inputs import learner_syncs
from chaos.checkers.base import CheckInput, MergeFacts, Verdict
from chaos.checkers.trained import Learners
from chaos.history import History
from chaos.records import JsonObject
from trainer import events as ev
from trainer.core.checkpoint_meta import Key  # one upload: learner, incarnation, fragment, base version, round
from trainer.core.replies import UNREACHABLE  # a learner's sync_result when no answer came

SHOWN = 5


@dataclass
class SyncerBook:
    """The syncer's side, fed its events in time order."""

    pending: dict[int, dict[str, tuple[Key, int]]] = field(
        default_factory=dict
    )  # fragment -> learner -> (key, tokens)
    bins: Counter = field(default_factory=Counter)
    accepted: dict[Key, int] = field(default_factory=dict)  # every accepted key -> its claimed c_tokens
    merged_at: list[tuple[int, int]] = field(default_factory=list)  # (merges_total, tokens merged) per merge
    starts: int = 0
    problems: list[str] = field(default_factory=list)
    facts: MergeFacts = field(default_factory=MergeFacts)
    rounds: list[tuple[int, int, int]] = field(default_factory=list)  # (merges_total, fragment, round) per merge
    last_round: dict[int, int] = field(default_factory=dict)  # fragment -> the last round merged

    def start(self, e: ev.SyncerStart) -> None:
        self.starts += 1
        if self.starts > 1:  # a restart: what was pending died with the process, and merges after the checkpoint
            for frag in self.pending.values():
                self.bins["lost with the syncer"] += sum(t for _, t in frag.values())
            self.pending = {}
            undone = (
                sum(t for n, t in self.merged_at if n > e.restored_from_merges)
                if e.restored_from_merges >= 0
                else sum(t for _, t in self.merged_at)
            )
            self.bins["merged"] -= undone
            self.bins["lost with the syncer"] += undone
            self.merged_at = [
                (n, t) for n, t in self.merged_at if e.restored_from_merges >= 0 and n <= e.restored_from_merges
            ]
            # The restored syncer's rounds: those its checkpoint held (merges after it were lost and may merge again).
            self.rounds = [x for x in self.rounds if x[0] <= e.restored_from_merges]
            self.last_round = {}
            for _, fragment, r in self.rounds:
                self.last_round[fragment] = max(self.last_round.get(fragment, -1), r)

    def upload(self, e: ev.Upload) -> None:
        key = (e.learner_id, e.learner_incarnation, e.fragment, e.base_version, e.round)
        if e.duplicate:
            return
        self.accepted.setdefault(key, e.c_tokens)
        frag = self.pending.setdefault(e.fragment, {})
        if e.learner_id in frag:
            self.bins["superseded"] += frag[e.learner_id][1]
        frag[e.learner_id] = (key, e.c_tokens)

    def merge(self, m: ev.Merge) -> None:
        frag = self.pending.pop(m.fragment, {})
        if self.facts.algorithm.clocked:
            self._rounds(m)
        total = 0
        for p in m.participants:
            key = (p.learner_id, p.incarnation, m.fragment, p.base_version, p.round)
            held = frag.pop(p.learner_id, None)
            if held is None or held[0] != key:
                self.problems.append(
                    f"merge {m.merges_total} (fragment {m.fragment} → v{m.version}) took "
                    f"{p.learner_id}'s contribution (base v{p.base_version}, round {p.round}), which "
                    "was not pending"
                )
                continue
            total += p.c_tokens
            self.bins["capped"] += held[1] - p.c_tokens
        self.bins["merged"] += total
        self.merged_at.append((m.merges_total, total))
        for lid, (key, tokens) in frag.items():
            self.bins["unaccounted"] += tokens
            self.problems.append(
                f"merge {m.merges_total} (fragment {m.fragment} → v{m.version}) left out {lid}'s "
                f"accepted upload (base v{key[3]}, round {key[4]}, {tokens} tokens), not superseded"
            )

    def _rounds(self, m: ev.Merge) -> None:
        """A round merges once; with late uploads refused, no contribution made for a merged round is merged."""
        last = self.last_round.get(m.fragment, -1)
        if m.round <= last:
            self.problems.append(
                f"merge {m.merges_total} closed round {m.round} of fragment {m.fragment}, which "
                f"had merged (last merged round {last}): a round merges once"
            )
        late = [p for p in m.participants if p.round <= last]
        if late and self.facts.algorithm.late_uploads != "carry":
            self.problems.append(
                f"merge {m.merges_total} (fragment {m.fragment}, round {m.round}) took "
                f"{', '.join(p.learner_id for p in late)}'s upload for round {late[0].round}, which "
                "had merged (late_uploads: refuse — a late upload misses its merge)"
            )
        self.last_round[m.fragment] = max(last, m.round)
        self.rounds.append((m.merges_total, m.fragment, m.round))

    def refused_merge(self, r: ev.Reject) -> None:
        for _, tokens in self.pending.pop(r.fragment, {}).values():
            self.bins["dropped by a refused merge"] += tokens

    def end(self) -> None:
        for frag in self.pending.values():
            self.bins["in flight at the end"] += sum(t for _, t in frag.values())


def _folds_lost(h: History) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Per (learner, reason): the spans in which a syncer incarnation that was then killed (no ``syncer_stop``)
    folded that learner's upload refusals (a logged one's ``folds_for_s``): a refusal told in one may stand only
    in a folded count, which the kill lost before any event carried it."""
    spans: dict[tuple[str, str], list[tuple[float, float]]] = {}
    current: list[ev.Reject] = []

    def close(killed: bool) -> None:
        for r in current if killed else ():
            spans.setdefault((r.learner_id, r.reason), []).append((r.ts, r.ts + r.folds_for_s))
        current.clear()

    for e in h.of(ev.SyncerStart, ev.SyncerStop, ev.Reject):
        if isinstance(e, ev.SyncerStart):
            close(killed=True)  # a start after one without its stop: that one was killed
        elif isinstance(e, ev.SyncerStop):
            close(killed=False)  # it stopped: it logged what it had folded (trainer.syncer._log_folded_locked)
        elif e.call == "Upload" and e.folds_for_s > 0:
            current.append(e)
    close(killed=True)
    return spans


def _learner_book(inp: CheckInput, syncer: SyncerBook) -> tuple[Counter, list[str], int]:
    """The learners' side: what each sent, what it was told, checked against the syncer's book; and how many
    refusals a learner was told stand only in folded counts a killed syncer lost (:func:`_folds_lost`)."""
    h = inp.history
    uploads_refused = [r for r in h.of(ev.Reject) if r.call == "Upload"]
    rejects = Counter((r.learner_id, r.fragment, r.base_version, r.reason) for r in uploads_refused)
    # Refusals the syncer folded into a logged one (trainer.core.repeats: a learner's beyond a few per reason and
    # window): counted per learner and reason, each accounts for one refusal a learner was told of and no event names.
    # The events that carry the folded ones left at shutdown name no upload (fragment -1): they stand for theirs only.
    folded = Counter[tuple[str, str]]()
    for r in uploads_refused:
        folded[(r.learner_id, r.reason)] += r.repeats if r.fragment >= 0 else r.refusals
    lost_folds = _folds_lost(h)
    lost = 0
    bins: Counter = Counter()
    problems: list[str] = []
    sent: dict[Key, tuple[int, float]] = {}  # -> (c_tokens, when it was sent)
    for inc, e in learner_syncs(h):
        key = (e.source, inc, e.fragment, e.base_version, e.round)
        if isinstance(e, ev.SyncStartEvent):
            sent[key] = (e.c_tokens, e.ts)
            bins["sent"] += e.c_tokens
            continue
        tokens, sent_at = sent.get(key, (0, e.ts))
        if e.accepted:
            bins["accepted"] += tokens
            if key not in syncer.accepted:
                problems.append(
                    f"{e.source} was told its upload for fragment {e.fragment} (base v{e.base_version}, "
                    f"round {e.round}) was accepted; the syncer has no such upload"
                )
            elif syncer.accepted[key] != tokens:
                problems.append(
                    f"{e.source}'s upload for fragment {e.fragment} (round {e.round}) carried {tokens} "
                    f"tokens; the syncer counted {syncer.accepted[key]}"
                )
        elif e.reason == UNREACHABLE:
            bins["no answer" if key not in syncer.accepted else "accepted, answer lost"] += tokens
        else:
            bins[f"refused: {e.reason}"] += tokens
            if rejects[(e.source, e.fragment, e.base_version, e.reason)]:
                continue
            if folded[(e.source, e.reason)] > 0:
                folded[(e.source, e.reason)] -= 1
            elif any(a <= e.ts and sent_at <= b for a, b in lost_folds.get((e.source, e.reason), ())):
                lost += 1  # the syncer was folding these when it was killed: its count of them died with it
            else:
                problems.append(
                    f"{e.source} was told {e.reason!r} for fragment {e.fragment} (base "
                    f"v{e.base_version}); the syncer recorded no such refusal"
                )
    answered = sum(t for b, t in bins.items() if b != "sent")
    bins["no answer recorded"] = bins["sent"] - answered  # the learner died, or the run ended, before an answer
    known = {e.learner_id for e in h.of(ev.LearnerStart)}
    for key in syncer.accepted:
        if key[0] in known and key not in sent:
            problems.append(
                f"the syncer accepted an upload of {key[0]}/{key[1]} for fragment {key[2]} (base v{key[3]}, "
                f"round {key[4]}) that no sync_start of that incarnation sent"
            )
    return bins, problems, lost


def _data_book(inp: CheckInput) -> tuple[dict, list[str]]:
    """The data ledger: each learner incarnation trains its own stream — (seed, the learner's data key, the
    incarnation index the syncer gave it at its first join) — from its start, one batch a step; no stream is
    trained by two incarnations or two learners (shards disjoint, no sample trained twice across restarts)."""
    problems: list[str] = []
    incarnation: dict[str, str] = {}
    first_index: dict[tuple[str, str], int] = {}
    streams: dict[tuple[int, ...], tuple[str, str]] = {}
    keys: dict[str, int] = {}
    positions = 0
    for e in inp.history.of(ev.LearnerStart, ev.LearnerJoin, ev.Step):
        if isinstance(e, ev.LearnerStart):
            incarnation[e.learner_id] = e.learner_incarnation
            continue
        who = (e.source, incarnation.get(e.source, ""))
        if isinstance(e, ev.LearnerJoin):
            first_index.setdefault((e.source, e.learner_incarnation), e.incarnation_index)
            continue
        if e.data is None:
            continue
        positions += 1
        stream = tuple(e.data.stream)
        owner = streams.setdefault(stream, who)
        if owner != who and len(problems) < 50:
            problems.append(
                f"{who[0]} incarnation {who[1]} trains data stream {list(stream)}, which "
                f"{owner[0]} incarnation {owner[1]} trained: the same samples twice"
            )
        if len(stream) == 3:
            key = keys.setdefault(who[0], stream[1])
            if key != stream[1] and len(problems) < 50:
                problems.append(f"{who[0]} switched data key from {key} to {stream[1]}")
            index = first_index.get(who)
            if index is not None and stream[2] != index and len(problems) < 50:
                problems.append(
                    f"{who[0]} incarnation {who[1]} trains stream {list(stream)}, not the incarnation "
                    f"index {index} the syncer gave it: a rejoin that does not start its own data"
                )
        if e.data.batches != e.step and len(problems) < 50:
            problems.append(
                f"{who[0]} at step {e.step} had drawn {e.data.batches} batches of its stream (one a "
                "step from its start: data skipped or trained twice)"
            )
    duplicate_keys = {k for k in keys.values() if list(keys.values()).count(k) > 1}
    problems += [
        f"learners {sorted(lid for lid, k in keys.items() if k == dk)} share data key {dk}: their shards overlap"
        for dk in sorted(duplicate_keys)
    ]
    return {"streams": len(streams), "positions": positions}, problems


REPORT_LAGS = 1  # report intervals a learner's count may trail its training at the syncer


def _restores(h: History) -> list[tuple[float, float]]:
    """(when a syncer restarted, when what it restored was written): the checkpoint's event, else — nothing
    restored, or no event of it — the previous syncer's start (it knew nothing later for certain)."""
    out: list[tuple[float, float]] = []
    starts = h.of(ev.SyncerStart)
    checkpoints = h.of(ev.Checkpoint)
    for prev, e in zip(starts, starts[1:]):
        written = [c.ts for c in checkpoints if c.merges_total == e.restored_from_merges and c.ts <= e.ts]
        out.append((e.ts, written[-1] if written and e.restored_from_merges >= 0 else prev.ts))
    return out


def _budget(inp: CheckInput) -> tuple[JsonObject | None, list[str]]:
    """The result is fixed at the budget by the syncer's count, and that count agrees with what the learners say they
    trained (chaos.checkers.trained): no more than they trained, and no less than they had reported by then."""
    done = inp.history.of(ev.Finished)
    budget, one_round = inp.facts.token_budget, inp.facts.round_tokens
    if not done or not budget or not one_round:
        return None, []
    tokens, t = done[0].tokens_total, done[0].ts
    # One round of every learner, or a quarter of the budget where reports come coarser than rounds (a real
    # 300k-token run reached its budget with one report at 1.11×): the 3.57× of a late result still fails.
    allowed = max(one_round, budget // 4)
    evidence: JsonObject = {
        "finished_tokens": tokens,
        "budget": budget,
        "one_round": one_round,
        "allowed_over": allowed,
    }
    problems = []
    if not budget <= tokens <= budget + allowed:
        problems.append(
            f"the result was fixed at {tokens} tokens, {tokens / budget:.2f}× the budget {budget} "
            f"(allowed: up to {allowed} tokens beyond it)"
        )
    h = inp.history
    learners = Learners.of(h.events)
    if not learners.incarnations:
        evidence["learners"] = "no learner events: the syncer's count taken on trust"
        return evidence, problems
    low, high = learners.at(t, inp.facts.summary_tokens)
    lag = REPORT_LAGS * inp.facts.report_interval_s
    countable = learners.countable(t, lag, _restores(h))
    logged = {i.learner_id for i in learners.incarnations}
    unlogged = sorted({j.learner_id for j in h.of(ev.Join)} - logged)
    evidence["learners"] = {
        "trained_at_least": low,
        "trained_at_most": high,
        "reported_at_least": countable,
        "incarnations": len(learners.incarnations),
        "report_lag_s": lag,
        "without_events": unlogged,
    }
    if high < tokens and not unlogged:
        problems.append(
            f"the syncer fixed the result at {tokens} tokens; its learners had trained at most {high} by then "
            "(their step events): it counted tokens nobody trained"
        )
    if countable > tokens + one_round:
        problems.append(
            f"the learners had trained {countable} tokens ({countable / budget:.2f}× the budget) a report before "
            f"the syncer fixed the result at {tokens}: it left {countable - tokens} tokens uncounted, more than one "
            f"round ({one_round}) — learners trained past the budget"
        )
    return evidence, problems


def check_ledger(inp: CheckInput) -> Verdict:
    if any(p.base_version < 0 for m in inp.history.of(ev.Merge) for p in m.participants):
        return Verdict(
            "ledger",
            "indeterminate",
            "merge participants carry no base version (a log from before the "
            "ledger): contributions cannot be matched to uploads",
        )
    book = SyncerBook(facts=inp.facts.merge)
    for e in inp.history.of(ev.SyncerStart, ev.Upload, ev.Merge, ev.Reject):
        if isinstance(e, ev.SyncerStart):
            book.start(e)
        elif isinstance(e, ev.Upload):
            book.upload(e)
        elif isinstance(e, ev.Merge):
            book.merge(e)
        elif e.call == "merge":
            book.refused_merge(e)
    book.end()
    learner_bins, learner_problems, folds_lost = _learner_book(inp, book)
    budget, budget_problems = _budget(inp)
    data, data_problems = _data_book(inp)
    problems = book.problems + learner_problems + budget_problems + data_problems
    accepted = sum(book.accepted.values())
    evidence: JsonObject = {
        "syncer": {"accepted": accepted, **dict(book.bins)},
        "learners": dict(learner_bins),
        "refusals_in_folds_a_kill_lost": folds_lost,
        "budget": budget,
        "data": data,
        "problems": len(problems),
        "first_problems": problems[:SHOWN],
    }
    if problems:
        return Verdict("ledger", "fail", f"{len(problems)} problem(s); first: {problems[0]}", evidence)
    if not book.accepted:
        return Verdict(
            "ledger", "indeterminate", "the syncer accepted no upload: nothing to account for", evidence
        )
    merged = book.bins["merged"]
    return Verdict(
        "ledger",
        "pass",
        f"{accepted} contribution tokens uploaded accounted for ({merged} merged; a contribution token is a trained "
        "token sent for one fragment); the learners' "
        "and the syncer's books agree"
        + (
            "; result fixed at the budget"
            + ("" if isinstance(budget.get("learners"), str) else ", which the learners' own counts bear out")
            if budget
            else ""
        )
        + (
            f"; {folds_lost} refusal(s) learners were told stand in folded counts a killed syncer lost"
            if folds_lost
            else ""
        )
        + (
            f"; {data['streams']} data streams, each its own incarnation's from its start"
            if data["positions"]
            else ""
        ),
        evidence,
    )
