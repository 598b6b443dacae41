"""The event schema: every process writes these, as JSON lines, and everything else reads them.

One line per event, with ``ts`` (wall-clock Unix seconds), ``source`` (who
wrote it: ``syncer`` or the learner id) and ``kind`` (which model below). The
chaos controller's history, the checkers, reports and benchmarks all parse
lines with :func:`parse_event` / :func:`read_events`, so a field added here is
seen everywhere. ``docs/events.md`` documents each kind; a test keeps the two
in step.

Why one module: the schema is one closed union (:data:`Event`) that every reader parses against; split, each
reader would import every part, and a kind added to one file and not the union would be silently unreadable.

Example:
    >>> e = Merge(source="syncer", fragment=0, version=3, base_version=2, participants=[],
    ...           rule="rda", wait_s=0.01, quorum_wait_s=0.0, outer_grad_norm=0.5,
    ...           merges_total=7, tokens_total=1024)
    >>> parse_event(e.model_dump_json()).version
    3
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Literal, TextIO

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from trainer.errors import TrainerError


class _Event(BaseModel):
    # NaN/Inf are written as the JSON constants Python's json module also reads: a diverged
    # learner's loss is evidence, and must round-trip rather than turn into null.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")
    ts: float = Field(default_factory=time.time)
    source: str = ""


# ---- syncer ---------------------------------------------------------------
class SyncerStart(_Event):
    kind: Literal["syncer_start"] = "syncer_start"
    syncer_incarnation: str
    address: str
    config_hash: str
    versions: list[int]
    restored_from_merges: int  # -1: fresh start
    pid: int
    digests: list[FragmentDigest] = []  # per fragment, the state it starts from (fresh or restored)


class SyncerStop(_Event):
    kind: Literal["syncer_stop"] = "syncer_stop"
    why: str
    versions: list[int]
    merges_total: int


class Join(_Event):
    kind: Literal["join"] = "join"
    learner_id: str
    learner_incarnation: str
    incarnation_index: int
    rejoined: bool


class Leave(_Event):
    kind: Literal["leave"] = "leave"
    learner_id: str
    learner_incarnation: str
    why: str


class Upload(_Event):
    """An upload the syncer accepted into a merge round (or acknowledged as a duplicate)."""

    kind: Literal["upload"] = "upload"
    learner_id: str
    learner_incarnation: str
    fragment: int
    base_version: int
    bytes: int
    seconds: float
    c_steps: int
    c_tokens: int
    duplicate: bool
    round: int = 0  # the round it was made for (rounds: clock)
    late: bool = False  # its round had merged; carried into the next (late_uploads: carry)
    digest: str = ""  # of the tensors received (trainer.core.audit.digest)


class Reject(_Event):
    """Something the syncer refused; global state was not touched."""

    kind: Literal["reject"] = "reject"
    call: str
    reason: str
    detail: str
    learner_id: str = ""
    fragment: int = -1
    base_version: int = -1
    # Refusals of the same kind folded into this one (trainer.core.repeats: a caller without a credential's logged
    # once per call, reason and window; a learner's, a few per learner, call, reason and window); the event stands
    # for 1 + repeats refusals.
    repeats: int = 0
    # Seconds after this one during which further refusals of its kind are folded (its window's burst is full): one
    # told of then may stand only in a folded count, which a SIGKILL before the next logged one loses (the ledger).
    folds_for_s: float = 0.0

    @property
    def refusals(self) -> int:
        """How many refusals this event stands for."""
        return 1 + self.repeats


def refusals_by_reason(rejects: Iterable[Reject]) -> Counter[str]:
    """How many refusals ``rejects`` stand for, by reason (folded ones included: :attr:`Reject.refusals`)."""
    out = Counter[str]()
    for r in rejects:
        out[r.reason] += r.refusals
    return out


class ParticipantInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    learner_id: str
    incarnation: str
    weight: float
    c_steps: int
    c_tokens: int
    base_version: int = -1  # the global version its outer gradient was computed from (-1: older logs)
    round: int = 0
    drift: float = (
        0.0  # its pull from the rounds' medians after this merge, lr per step summed (trainer.core.drift)
    )


class FragmentDigest(BaseModel):
    """A fragment's value and optimizer state, digested (trainer.core.audit.digest)."""

    params: str
    opt: str


class MergeDigests(BaseModel):
    """What a merge consumed and produced, digested (trainer.core.audit.MergeAudit); ``file``: its tensors under the
    run directory's ``audit/`` (empty: not kept, only digested — a seeded sample is kept)."""

    file: str = ""
    base: str
    uploads: list[str]
    anchors: list[str | None]
    opt_before: str
    opt_after: str
    delta: str
    result: str
    scale: float = 1.0


class MergeDecision(BaseModel):
    """What timed a merge: contributions and active learners when it merged, and the grace window's moving
    averages (seconds) as the syncer held them (trainer.core.grace)."""

    contributions: int
    active_learners: int
    t_step: float
    t_quorum: float
    t_upload: float
    t_merge: float
    t_broadcast: float
    # grace_waits_for heard: the learners the round waited for, those in and the others heard lately
    # (trainer.core.grace.waited_for); None: it waited for every active learner.
    awaited_learners: int | None = None


class Merge(_Event):
    kind: Literal["merge"] = "merge"
    fragment: int
    version: int
    base_version: int
    participants: list[ParticipantInfo]
    rule: str
    wait_s: float  # round opened -> merged (rounds: clock: from its scheduled opening)
    quorum_wait_s: float  # quorum reached -> merged (grace actually used)
    outer_grad_norm: float
    merges_total: int
    tokens_total: int
    round: int = 0  # the fragment's round this merge closed (rounds: clock; one merge per round)
    late: int = 0  # contributions carried in from rounds that had merged
    held: int = 0  # participants whose body came after quorum + grace, their header before (a hold)
    held_s: float = 0.0  # how long past quorum + grace the last of them came
    # Since it first held its quorum with its opening passed -> merged, rounds it was carried over included (the
    # audit bounds it: grace, a hold, a few rounds of a shell's lag). None: a log from before, or never eligible.
    due_wait_s: float | None = None
    audit: MergeDigests | None = None  # None: a log from before the merge audit
    decision: MergeDecision | None = None  # None: a flush after training ended, or a log from before


class Checkpoint(_Event):
    kind: Literal["checkpoint"] = "checkpoint"
    merges_total: int
    versions: list[int]
    path: str
    seconds: float
    params_finite: bool
    digests: list[FragmentDigest] = []  # per fragment, what the checkpoint holds
    state_digest: str = ""  # of its metadata: versions, clock, token ledger, merged keys … (merge audit)


class Restore(_Event):
    kind: Literal["restore"] = "restore"
    merges_total: int
    checkpoint_versions: list[int]
    versions: list[int]  # after the skip
    version_skip: int
    path: str
    digests: list[FragmentDigest] = []  # per fragment, what was restored
    state_digest: str = (
        ""  # of the restored metadata, versions less the skip: the checkpoint's if nothing was lost
    )


class Eval(_Event):
    kind: Literal["eval"] = "eval"
    merges_total: int
    versions: list[int]
    loss: float
    loss_floor: float
    tokens_total: int
    final: bool = False


class Finished(_Event):
    kind: Literal["finished"] = "finished"
    tokens_total: int
    merges_total: int
    versions: list[int]


class Settled(_Event):
    """Training stopped after a settle phase (syncer.settle_s): everyone was merged again, or time ran out."""

    kind: Literal["settled"] = "settled"
    seconds: float  # from the budget to now
    awaited: list[str]  # learners still away or not merged again (empty: everyone was)
    merges_total: int


# ---- learner --------------------------------------------------------------
class LearnerStart(_Event):
    kind: Literal["learner_start"] = "learner_start"
    learner_id: str
    learner_incarnation: str
    pid: int
    syncer: str
    config_hash: str
    corrupt: str = ""  # "nan" / "garbage": a deliberately corrupt learner (fault injection), "" normally


class LearnerJoin(_Event):
    kind: Literal["learner_join"] = "learner_join"
    learner_incarnation: str
    incarnation_index: int
    versions: list[int]
    syncer_incarnation: str


class StartTogether(_Event):
    """A first start waited for the other learners (``learner.start_together_s``)."""

    kind: Literal["start_together"] = "start_together"
    joined: int  # learners active when it started (M unless it gave up waiting)
    waited_s: float


class StateFetch(_Event):
    kind: Literal["state_fetch"] = "state_fetch"
    versions: list[int]
    seconds: float
    digests: list[str] = []  # per fragment, of the value the learner took (trainer.core.audit.digest)


class DataPosition(BaseModel):
    """Where a learner is in its training data: its stream's key (the config's seed, the learner's data key, the
    incarnation index the syncer gave it: trainer.data.learner_batches) and how many batches it drew from it."""

    stream: list[int]
    batches: int


class Step(_Event):
    """A summary every ``learner.step_event_every`` steps."""

    kind: Literal["step"] = "step"
    step: int
    loss: float
    tokens: int
    step_time_s: float
    blocked_s: float  # time spent waiting for merged fragments since the last summary
    data: DataPosition | None = None  # None: a log from before the data ledger


class SyncStartEvent(_Event):
    kind: Literal["sync_start"] = "sync_start"
    fragment: int
    base_version: int
    c_steps: int
    c_tokens: int
    step: int
    round: int = 0
    # Clocked rounds, for diagnosing late uploads: the cluster step this learner read on its copy of the syncer's
    # clock at the boundary, how far ahead it looked for its next boundary (trainer.core.step_timer, including the
    # margin below) and the margin for its header's lag, in cluster steps (trainer.core.header_lag).
    clock_step: float | None = None
    lookahead_s: float | None = None
    lag_margin_steps: float | None = None
    base_digest: str = (
        ""  # of the global value of base_version it computes its outer gradient against (merge audit)
    )


class SyncResult(_Event):
    kind: Literal["sync_result"] = "sync_result"
    fragment: int
    base_version: int
    round: int = 0  # the sync_start's, so that the ledger matches the two (chaos/checkers/ledger.py)
    accepted: bool
    reason: str
    seconds: float
    bytes: int


class Apply(_Event):
    kind: Literal["apply"] = "apply"
    fragment: int
    version: int
    step: int
    digest: str = ""  # of the fragment the learner holds after applying it (trainer.core.audit.digest)


class ProgressHeard(_Event):
    """A Join's or a report's reply carried more token progress: the inner learning rate's schedule reads it from the
    next step."""

    kind: Literal["progress_heard"] = "progress_heard"
    step: int  # steps done when it was heard: step ``step + 1`` is the first to use it
    progress: float


class Unreachable(_Event):
    kind: Literal["syncer_unreachable"] = "syncer_unreachable"
    error: str


class Reconnected(_Event):
    kind: Literal["syncer_reconnected"] = "syncer_reconnected"
    down_s: float


class LearnerStop(_Event):
    kind: Literal["learner_stop"] = "learner_stop"
    why: str
    step: int
    tokens: int


Event = Annotated[
    SyncerStart
    | SyncerStop
    | Join
    | Leave
    | Upload
    | Reject
    | Merge
    | Checkpoint
    | Restore
    | Eval
    | Finished
    | Settled
    | LearnerStart
    | LearnerJoin
    | StartTogether
    | StateFetch
    | Step
    | SyncStartEvent
    | SyncResult
    | Apply
    | ProgressHeard
    | Unreachable
    | Reconnected
    | LearnerStop,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENT_KINDS: tuple[str, ...] = tuple(m.model_fields["kind"].default for m in _Event.__subclasses__())


class EventError(TrainerError, ValueError):
    """A line is not a valid event; the message names the file and line."""


def parse_event(line: str) -> Event:
    return _ADAPTER.validate_json(line)


def jsonl_lines(text: str) -> list[str]:
    r"""The records of a JSON-lines text: split at ``\n`` only.

    ``str.splitlines`` also splits at ``\x85``, ``\u2028`` and other separators, which a JSON string may hold
    unescaped (a hostile learner id did), tearing one record in two.

    >>> jsonl_lines('{"id": "a\x85b"}\n{"id": 2}\n')
    ['{"id": "a\x85b"}', '{"id": 2}']
    """
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


def read_events(path: str | Path, *, strict: bool = True) -> list[Event]:
    """All events of a JSON-lines file. A torn last line (a killed writer) is skipped."""
    out: list[Event] = []
    lines = jsonl_lines(Path(path).read_text())
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(parse_event(line))
        except ValueError as err:
            if i == len(lines) and not line.endswith("}"):
                break  # the writer died mid-line
            if strict:
                raise EventError(f"{path}:{i}: not a valid event: {err}") from None
    return out


def iter_run_events(run_dir: str | Path) -> Iterator[Event]:
    """Every event of every ``events/*.jsonl`` file of a run directory, sorted by time."""
    files = sorted(Path(run_dir, "events").glob("*.jsonl"))
    events = [e for f in files for e in read_events(f)]
    yield from sorted(events, key=lambda e: e.ts)


class EventLog:
    """Thread-safe JSON-lines writer; each line is flushed so a SIGKILL loses at most one."""

    def __init__(
        self,
        path: str | Path | None,
        source: str,
        observers: tuple[Callable[[Event], None], ...] = (),
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.source = source
        self.clock = clock  # None: an event keeps the time it was made at; else stamped with clock() as written
        self.observers = observers  # e.g. trainer.telemetry.EventMetrics.observe: metrics follow the events
        self._lock = threading.Lock()
        self._fh: TextIO | None = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "a", buffering=1)

    def emit(self, event: Event) -> None:
        if not event.source:
            event.source = self.source
        if self.clock is not None:
            event.ts = self.clock()
        line = event.model_dump_json()
        with self._lock:
            if self._fh is not None:
                self._fh.write(line + "\n")
                self._fh.flush()
            for observe in self.observers:  # under the lock: a scrape sees events in the order they were written
                observe(event)

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
                self._fh = None


def dump_schema() -> str:
    """JSON Schema of every event kind (what ``docs/events.md`` describes)."""
    return json.dumps(_ADAPTER.json_schema(), indent=2)
