"""Unit tests for trainer.core.learner_protocol (the learner's step protocol, which the learner process and
deterministic mode's learner both drive).

:func:`drive` plays a learner against a fake syncer as a shell would (random acceptance, refusals, lost replies,
late long polls) and returns the protocol's broken promises; the planted defects below (the wrong fragment
uploaded, a result applied twice, counters not restarted on receipt) must each be caught by it.
"""

from __future__ import annotations

import ast
import dataclasses
import random
from pathlib import Path

import pytest

from trainer import events as ev
from trainer.config import RunConfig
from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.learner_book import LearnerBook, SyncStart
from trainer.core.learner_protocol import (
    Fetch,
    Halt,
    LearnerProtocol,
    Note,
    Rejoin,
    Report,
    take,
    upload_arrays,
)
from trainer.core.reasons import RejectReason
from trainer.core.replies import UNREACHABLE

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 64


def protocol(p=3, h=6, tau=2, staggered=True, blocking=False, clocked=False, versions=None) -> LearnerProtocol:
    proto = LearnerProtocol(
        FragmentSchedule(p, h, tau, staggered),
        blocking=blocking,
        clocked=clocked,
        tokens_per_step=TOKENS,
        lookahead_rule="mean",
        step_event_every=5,
    )
    proto.start(list(versions) if versions is not None else [0] * p, now=0.0)
    return proto


def kinds(actions) -> list[str]:
    return [a.kind.__name__ if isinstance(a, Note) else type(a).__name__ for a in actions]


# ---- a fake syncer, and the promises checked --------------------------------------------------------------
def drive(proto: LearnerProtocol, seed: int, steps: int = 80) -> list[str]:
    """Step ``proto`` ``steps`` times against a fake syncer (uploads accepted, refused as stale or lost at random;
    long polls answered late), as a non-blocking shell does; return what broke the protocol's promises:

    - a sync starts only for a fragment the schedule has due at that step;
    - its counters are the steps and tokens since the fragment was last received (or since the start);
    - a result is applied at most once, newer than the last, and not before τ steps after the sync it answers;
    - what is applied is what the long poll brought for that fragment and version.
    """
    rng = random.Random(seed)
    sched = proto.fragment_schedule
    n = sched.num_fragments
    versions = [0] * n  # the syncer's
    since = [0] * n  # steps since each fragment was last received
    synced: dict[int, tuple[int, bool]] = {}  # fragment -> (step its latest sync started, answered by a refusal)
    applied: dict[int, list[int]] = {p: [] for p in range(n)}
    in_flight: list[SyncStart] = []
    polls: list[int] = []
    problems: list[str] = []

    def act(actions) -> None:
        polls.extend(a.fragment for a in actions if isinstance(a, Fetch))

    for step in range(1, steps + 1):
        starts = proto.stepped(now=float(step))
        since = [k + 1 for k in since]
        for u in starts:
            s = u.start
            if s.fragment not in sched.due(step):
                problems.append(
                    f"step {step}: fragment {s.fragment} synced, the schedule has {sched.due(step)} due"
                )
            if (s.c_steps, s.c_tokens) != (since[s.fragment], since[s.fragment] * TOKENS):
                problems.append(
                    f"step {step}: fragment {s.fragment} counters {s.c_steps} after {since[s.fragment]}"
                )
            synced[s.fragment] = (step, False)
            in_flight.append(s)
        for s in list(in_flight):  # the syncer answers some uploads
            if rng.random() < 0.5:
                continue
            in_flight.remove(s)
            kind = rng.choice(["accept", "accept", "stale", "lost"])
            if kind == "accept":
                versions[s.fragment] += 1  # its round merges at once
                act(
                    proto.uploaded(
                        s,
                        step,
                        accepted=True,
                        reason="",
                        seconds=0.0,
                        nbytes=0,
                        current_version=versions[s.fragment] - 1,
                    )
                )
            else:
                reason = RejectReason.STALE_VERSION.value if kind == "stale" else UNREACHABLE
                act(
                    proto.uploaded(
                        s,
                        step,
                        accepted=False,
                        reason=reason,
                        seconds=0.0,
                        nbytes=0,
                        current_version=versions[s.fragment],
                    )
                )
                if synced.get(s.fragment, (0, True))[0] == s.step:
                    synced[s.fragment] = (s.step, True)
        for p in list(polls):  # some long polls come back, with whatever version the syncer has
            want = proto.fetch_due(p)
            if want is None:
                polls.remove(p)
            elif versions[p] >= want and rng.random() < 0.6:
                proto.fetched(p, versions[p], payload=(p, versions[p]))
                if rng.random() < 0.3:  # the same reply delivered twice (a retried poll)
                    proto.fetched(p, versions[p], payload=(p, versions[p]))
        for p, version, payload in proto.ready():
            if payload != (p, version):
                problems.append(f"step {step}: fragment {p} applied {payload}, not version {version}'s value")
            if applied[p] and version <= applied[p][-1]:
                problems.append(f"step {step}: fragment {p} version {version} applied after {applied[p][-1]}")
            started, refused = synced.get(p, (None, True))
            if started is not None and not refused and step < sched.apply_step(started):
                problems.append(f"step {step}: fragment {p} applied before τ after its sync at step {started}")
            applied[p].append(version)
            since[p] = 0
            synced.pop(p, None)
    if not any(applied.values()):
        problems.append("nothing was ever applied: the drive tested nothing")
    return problems


SETUPS = [dict(p=3, h=6, tau=2), dict(p=1, h=4, tau=0), dict(p=4, h=8, tau=3, staggered=False)]


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("seed", range(8))
def test_the_protocol_keeps_its_promises_against_a_fake_syncer(setup, seed) -> None:
    assert drive(protocol(**setup), seed) == []


def _planted(monkeypatch, what: str) -> None:
    if what == "wrong fragment":
        on_step = LearnerBook.on_step

        def shifted(self, *args, **kw):
            n = self.fragment_schedule.num_fragments
            # BUG: the header names the fragment after the one due (an off-by-one in the shell's lookup)
            return [dataclasses.replace(s, fragment=(s.fragment + 1) % n) for s in on_step(self, *args, **kw)]

        monkeypatch.setattr(LearnerBook, "on_step", shifted)
    elif what == "applied twice":
        ready = LearnerProtocol.ready

        def again(self):
            out = ready(self)
            if out:
                self._last = out
            return out or getattr(self, "_last", [])  # BUG: the last result replayed when nothing is new

        monkeypatch.setattr(LearnerProtocol, "ready", again)
    elif what == "counters kept":
        book_ready = LearnerBook.ready

        def keeps(self, step):
            kept = (list(self._steps), list(self._tokens))
            out = book_ready(self, step)
            self._steps, self._tokens = kept  # BUG: c_steps/c_tokens not restarted on receipt
            return out

        monkeypatch.setattr(LearnerBook, "ready", keeps)


@pytest.mark.parametrize("what", ["wrong fragment", "applied twice", "counters kept"])
def test_a_planted_defect_is_caught(monkeypatch, what) -> None:
    _planted(monkeypatch, what)
    assert any(drive(protocol(**setup), seed) for setup in SETUPS for seed in range(4))


# ---- the step loop ----------------------------------------------------------------------------------------
def test_a_sync_starts_at_the_fragments_scheduled_steps_with_its_counters() -> None:
    proto = protocol(p=2, h=4, tau=1, versions=[5, 7])
    starts = [u.start for step in range(1, 5) for u in proto.stepped(now=float(step))]
    # offsets: fragment 0 syncs after step 2, fragment 1 after step 4
    assert starts == [SyncStart(0, 5, 2, 2 * TOKENS, 2), SyncStart(1, 7, 4, 4 * TOKENS, 4)]
    assert (proto.step, proto.tokens) == (4, 4 * TOKENS)


def test_a_result_is_applied_tau_steps_after_its_sync_and_only_once() -> None:
    proto = protocol(p=1, h=2, tau=2)
    proto.stepped(now=1.0)
    [u] = proto.stepped(now=2.0)
    acts = proto.uploaded(u.start, 2.0, accepted=True, reason="", seconds=0.1, nbytes=8, current_version=0)
    assert kinds(acts) == ["SyncResult", "Fetch"] and acts[-1] == Fetch(0, 1)
    assert proto.fetched(0, 1, "v1") and not proto.fetched(0, 1, "v1 again")  # a repeated reply is not kept
    assert proto.ready() == []  # step 2 < 2 + τ
    proto.stepped(now=3.0)
    assert proto.ready() == []
    proto.stepped(now=4.0)
    assert proto.ready() == [(0, 1, "v1")]
    assert proto.ready() == [] and proto.book is not None and proto.book.counters(0) == (0, 0)
    assert proto.fetch_due(0) is None


def test_blocking_waits_for_the_merge_and_a_refusal_or_stop_ends_the_wait() -> None:
    proto = protocol(p=1, h=1, tau=0, staggered=False, blocking=True)
    [u] = proto.stepped(now=1.0)
    assert proto.waiting()
    proto.uploaded(u.start, 1.0, accepted=True, reason="", seconds=0.0, nbytes=0, current_version=0)
    assert proto.waiting()  # accepted: the merge is still to come
    proto.fetched(0, 1, "merged")
    assert proto.ready() == [(0, 1, "merged")] and not proto.waiting()
    [u] = proto.stepped(now=2.0)
    proto.uploaded(u.start, 2.0, accepted=False, reason=UNREACHABLE, seconds=0.0, nbytes=0, error="down")
    assert not proto.waiting()  # the sync failed: nothing to wait for
    [u] = proto.stepped(now=3.0)
    acts = proto.uploaded(u.start, 3.0, accepted=False, reason=RejectReason.FINISHED.value, seconds=0.0, nbytes=0)
    assert Halt() in acts and proto.stop and not proto.waiting()


def test_the_lookahead_adds_the_header_margin_on_the_clock() -> None:
    proto = protocol(p=1, h=4, tau=1, clocked=True)
    proto.heard_clock(0.0, (0.0, 0.5))
    [u] = proto.stepped(now=2.0, step_time_s=0.5)  # S = 4 read 0.5 s ahead: round 0 (opening at 4) is due
    assert (u.lookahead_s, u.lag_margin_steps, u.clock_step) == (0.5, 0.0, 4.0)
    proto.uploaded(u.start, 2.1, accepted=True, reason="", seconds=0.1, nbytes=0, sent_step=4.0, header_step=5.0)
    seconds, margin = proto.lookahead()
    assert margin == 1.0 and seconds == 0.5 + 1.0 * 0.5  # one step late once: aim one step (0.5 s) earlier


def test_the_step_summary_carries_the_time_blocked_since_the_last() -> None:
    proto = protocol()
    for step in range(1, 6):
        proto.stepped(now=float(step), step_time_s=0.05)
        proto.waited(0.1)
    assert proto.summary_due
    note = proto.summary(loss=2.0, step_time_s=0.05, data=ev.DataPosition(stream=[0], batches=5))
    assert (
        note.kind is ev.Step
        and note.fields["blocked_s"] == pytest.approx(0.5)
        and note.fields["tokens"] == 5 * TOKENS
    )
    assert proto.blocked_s == 0.0


# ---- replies ----------------------------------------------------------------------------------------------
def test_a_stale_refusal_fetches_the_current_version_and_stops_waiting() -> None:
    proto = protocol(p=1, h=1, tau=0, blocking=True, staggered=False, versions=[1])
    [u] = proto.stepped(now=1.0)
    acts = proto.uploaded(
        u.start,
        1.0,
        accepted=False,
        reason=RejectReason.STALE_VERSION.value,
        seconds=0.0,
        nbytes=0,
        current_version=4,
    )
    assert acts[-1] == Fetch(0, 4) and not proto.waiting() and proto.fetch_due(0) == 4


def test_a_forgotten_learner_rejoins_instead_of_reporting() -> None:
    proto = protocol()
    for step in range(1, 4):
        proto.stepped(now=float(step), step_time_s=0.07)
    assert proto.report() == Report(3, 3 * TOKENS, 0.07)
    acts = proto.reported(
        1.0, ok=False, stop=False, reason=RejectReason.UNKNOWN_LEARNER.value, progress=0.2, clock=(0, 0)
    )
    # more progress heard is logged with the steps done (the inner lr's schedule reads it from the next step on)
    assert acts == [Note(ev.ProgressHeard, {"step": 3, "progress": 0.2})]
    assert proto.report() == Rejoin() and proto.progress == 0.2
    proto.joined(2.0, progress=0.1, clock=(3.0, 0.5))
    assert isinstance(proto.report(), Report) and proto.progress == 0.2 and proto.clock.step_at(3.0) == 5.0
    assert (
        proto.reported(2.5, ok=True, stop=False, reason="", progress=0.2, clock=(5.0, 0.5)) == []
    )  # no more: no note
    assert kinds(proto.reported(3.0, ok=True, stop=True, reason="", progress=1.0, clock=(5.0, 0.5))) == [
        "ProgressHeard",
        "Halt",
    ]
    assert proto.stop


def test_reachability_notes_once_each_way() -> None:
    proto = protocol()
    assert kinds(proto.down(1.0, "refused")) == ["Unreachable"] and proto.down(2.0, "again") == []
    [note] = proto.up(4.5)
    assert note.kind is ev.Reconnected and note.fields == {"down_s": 3.5} and proto.up(5.0) == []


def test_the_protocol_of_a_run_config() -> None:
    cfg = RunConfig.model_validate({"algorithm": {"mode": "sync-diloco", "num_learners": 2}})
    proto = LearnerProtocol.for_run(cfg.algorithm, cfg.learner, tokens_per_step=128)
    assert proto.blocking and not proto.clocked and proto.fragment_schedule == cfg.algorithm.fragment_schedule()


# ---- applying and uploading -------------------------------------------------------------------------------
def test_take_overwrites_or_mixes_and_says_what_must_be_the_syncers() -> None:
    params, base = {"a": 1.0, "b": 5.0}, {"a": 0.0, "b": 0.0}
    assert take(params, base, {"a": 3.0}, alpha=None, as_param=float) == {"a": 3.0}
    assert params == {"a": 3.0, "b": 5.0} and base == {"a": 3.0, "b": 0.0}
    assert take(params, base, {"b": 1.0}, alpha=0.75, as_param=float) == {"b": 1.0}  # mixing: Θ is the syncer's
    assert params["b"] == 0.75 * 5.0 + 0.25 * 1.0


def test_upload_arrays_is_the_outer_gradient_or_the_gradient() -> None:
    assert upload_arrays({"w": 1.0}, {"w": 3.0, "x": 9.0}) == {"w": 2.0}
    assert upload_arrays({"w": 0.5}, None) == {"w": 0.5}


# ---- the shells keep none of it ---------------------------------------------------------------------------
@pytest.mark.parametrize("shell", ["trainer/learner.py", "chaos/sim/learner_node.py"])
def test_the_shells_take_these_decisions_from_the_protocol_only(shell) -> None:
    """The learner process and deterministic mode's learner drive the protocol; neither keeps its own copy of the
    book, the reply rules or the lookahead (the copies they had drifted)."""
    names = set()
    for node in ast.walk(ast.parse((ROOT / shell).read_text())):
        if isinstance(node, ast.ImportFrom):
            names |= {a.name for a in node.names}
    assert "LearnerProtocol" in names
    assert not names & {
        "LearnerBook",
        "upload_outcome",
        "report_outcome",
        "sync_step",
        "lookahead_s",
        "HeaderLags",
    }
