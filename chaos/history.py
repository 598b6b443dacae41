"""The recorded history of a chaos run: the controller's own records plus every trainer event.

The controller appends its records (the plan, phases, each fault's inject and
heal with invoke / ok / fail outcomes and evidence) to ``controller.jsonl`` as
they happen, flushed line by line, so an interrupted run still leaves its
history. After the run the trainer's events (``events/*.jsonl``, schema in
:mod:`trainer.events`) are merged in by timestamp and written to
``history.jsonl``. Checkers and reports read only this.

Example:
    h = History.read("runs/chaos/kill-one-learner")
    for w in h.fault_windows():
        print(w.fault_id, w.kind, w.targets, w.start, w.end)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from chaos.records import JsonObject, Record, SparseRecord
from trainer import events as ev


class _Record(Record):
    ts: float = Field(default_factory=time.time)
    source: str = "controller"


class PlannedFault(Record):
    """One fault of the plan as written (chaos.fault_plan.Planned.record): what, on whom, when (seconds after
    steady state, or a merge count), for how long."""

    fault_id: str
    kind: str
    targets: list[str]
    at: float | None
    at_merge: int | None
    duration: float
    params: JsonObject  # the fault's own settings (direction, rate, ...)


class PlanRecord(_Record):
    """The fault plan (chaos.fault_plan), written before the first fault (replay reads it back)."""

    kind: Literal["plan"] = "plan"
    scenario: str
    seed: int
    faults: list[PlannedFault]


class Phase(_Record):
    """A lifecycle step: bring_up, steady (first merge seen), schedule_done, finished; not_run and teardown
    have their own records below (what a report reads), the others a free-form detail."""

    kind: Literal["phase"] = "phase"
    name: str
    detail: JsonObject = {}


class Teardown(SparseRecord):
    """What teardown left: a clean one leaves no proxies, no processes and no problems.

    A backend gives the exit codes and problems, the controller what it found left afterwards, deterministic mode
    says it was simulated; each writes only its own fields.
    """

    proxies_left: list[str] = []
    processes_left: list[str] = []
    healed_on_teardown: bool = False  # faults were still active: the run ended by an error or a signal
    exit_codes: dict[str, int | None] = {}  # None: the unit never exited (or never ran)
    problems: list[str] = []
    simulated: bool = False


class TeardownPhase(Phase):
    name: Literal["teardown"] = "teardown"
    detail: Teardown = Teardown()  # type: ignore[assignment]


class NotRun(Record):
    faults: list[str]  # ids of the planned faults that never started


class NotRunPhase(Phase):
    name: Literal["not_run"] = "not_run"
    detail: NotRun  # type: ignore[assignment]


class Stalled(Record):
    """The progress watchdog ended the run (chaos.watchdog): no merge and no new tokens, outside every fault, for
    longer than its bound. The liveness check judges such a run FAIL."""

    since: float  # when the quiet began: the last progress or fault step (before a first merge: the bring-up)
    quiet_s: float  # how long it had lasted when the run was ended
    bound_s: float
    how: str  # the bound's derivation
    merges: int  # the syncer's merge count at the last poll (-1: it never answered one)
    tokens: int  # and its token count
    first_merge: bool  # whether the run had reached steady state (a first merge)


class StalledPhase(Phase):
    name: Literal["stalled"] = "stalled"
    detail: Stalled  # type: ignore[assignment]


# Phases whose detail has a record of its own (read by name: history.jsonl's layout is the same for every phase).
TYPED_PHASES: dict[str, type[Phase]] = {"teardown": TeardownPhase, "not_run": NotRunPhase, "stalled": StalledPhase}


class FaultOp(_Record):
    """One step of a fault: ``inject`` or ``heal``, and its outcome (invoke, then ok or fail)."""

    kind: Literal["fault"] = "fault"
    fault_id: str
    fault_kind: str
    action: Literal["inject", "heal"]
    outcome: Literal["invoke", "ok", "fail"]
    targets: list[str]
    params: JsonObject = {}  # the fault's own settings (direction, rate, ...)
    evidence: JsonObject = {}
    error: str = ""
    description: str = ""


ControllerRecord = PlanRecord | Phase | FaultOp
CONTROLLER_KINDS: dict[str, type[ControllerRecord]] = {"plan": PlanRecord, "phase": Phase, "fault": FaultOp}


def parse_record(line: str) -> ControllerRecord | ev.Event:
    data = json.loads(line)
    cls = CONTROLLER_KINDS.get(data.get("kind", ""))
    if cls is Phase:
        cls = TYPED_PHASES.get(data.get("name", ""), Phase)
    if cls is not None:
        return cls.model_validate(data)
    return ev.parse_event(line)


class Recorder:
    """Appends controller records to ``controller.jsonl``, one flushed line each (thread-safe)."""

    def __init__(self, path: Path, observers: tuple[Callable[[ControllerRecord], None], ...] = ()) -> None:
        self.path = Path(path)
        self.observers = observers  # e.g. chaos.fault_metrics.FaultMetrics.observe
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.records: list[ControllerRecord] = []

    def add(self, record: ControllerRecord) -> ControllerRecord:
        with self._lock:
            self.records.append(record)
            if not self._f.closed:
                self._f.write(record.model_dump_json() + "\n")
                self._f.flush()
            for observe in self.observers:
                observe(record)
        return record

    def close(self) -> None:
        with self._lock:
            self._f.close()


class EventTail:
    """One unit's events file as the run writes it: each :meth:`read` parses the complete lines appended since
    the last, keeping the events of ``kinds`` (the others are skipped unparsed); a missing file reads as none yet.

    The controller's view of the syncer's merges while the run executes (chaos.watchdog measures the pace on them).
    """

    def __init__(self, path: Path, kinds: tuple[str, ...]) -> None:
        self.path = Path(path)
        self._needles = tuple(f'"kind":"{k}"'.encode() for k in kinds)
        self._offset = 0
        self._partial = b""
        self.events: list[ev.Event] = []

    def read(self) -> list[ev.Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return self.events
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            if any(n in line for n in self._needles):
                try:
                    self.events.append(ev.parse_event(line.decode("utf-8", errors="replace")))
                except ValueError:
                    continue  # not an event of this schema: the checks read the file again after the run
        return self.events


@dataclass(frozen=True)
class FaultWindow:
    """When a fault was in effect: from its inject's outcome to its heal's (``end`` None: never healed)."""

    fault_id: str
    kind: str
    targets: tuple[str, ...]
    start: float
    end: float | None
    injected: bool  # inject reported ok
    healed: bool  # heal reported ok
    params: JsonObject
    evidence: JsonObject


@dataclass
class History:
    """Controller records and trainer events of one run, ordered by time."""

    records: list[ControllerRecord]
    events: list[ev.Event]

    @classmethod
    def read(cls, run_dir: str | Path) -> History:
        """Read the controller's ``controller.jsonl`` and the trainer events of ``run_dir/events``."""
        run_dir = Path(run_dir)
        records: list[ControllerRecord] = []
        path = run_dir / "controller.jsonl"
        if path.exists():
            for line in ev.jsonl_lines(path.read_text()):
                if line.strip():
                    r = parse_record(line)
                    if isinstance(r, (PlanRecord, Phase, FaultOp)):
                        records.append(r)
        events = sorted(ev.iter_run_events(run_dir), key=lambda e: e.ts) if (run_dir / "events").exists() else []
        return cls(records, events)

    def json_lines(self) -> list[str]:
        """Every record and event as one JSON line each, by time."""
        items: list[Any] = sorted([*self.records, *self.events], key=lambda x: x.ts)
        return [x.model_dump_json() for x in items]

    def write_merged(self, path: Path) -> None:
        """One JSON-lines file of everything, by time (the artifact a reader opens)."""
        with open(path, "w", encoding="utf-8") as f:
            for line in self.json_lines():
                f.write(line + "\n")

    # ---- queries -----------------------------------------------------------
    def of(self, *types: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, types)]

    def phase(self, name: str) -> Phase | None:
        return next((r for r in self.records if isinstance(r, Phase) and r.name == name), None)

    def plan(self) -> PlanRecord | None:
        return next((r for r in self.records if isinstance(r, PlanRecord)), None)

    def teardown(self) -> Teardown | None:
        """What teardown left (None: the run never got there)."""
        return next((r.detail for r in self.records if isinstance(r, TeardownPhase)), None)

    def backend(self) -> str:
        """Which backend ran it, as its bring-up recorded ("" if it did not: an older run directory)."""
        up = self.phase("bring_up")
        detail = up.detail if up else {}
        return str(detail.get("backend") or ("sim" if detail.get("simulated") else ""))

    def not_run(self) -> list[str]:
        """The ids of the planned faults that never started."""
        return next((r.detail.faults for r in self.records if isinstance(r, NotRunPhase)), [])

    def stalled(self) -> Stalled | None:
        """Why the progress watchdog ended the run (None: it did not)."""
        return next((r.detail for r in self.records if isinstance(r, StalledPhase)), None)

    @property
    def start(self) -> float:
        stamps = [r.ts for r in self.records] + [e.ts for e in self.events]
        return min(stamps, default=0.0)

    @property
    def end(self) -> float:
        stamps = [r.ts for r in self.records] + [e.ts for e in self.events]
        return max(stamps, default=0.0)

    def fault_windows(self) -> list[FaultWindow]:
        ops = [r for r in self.records if isinstance(r, FaultOp)]
        out = []
        for fid in dict.fromkeys(o.fault_id for o in ops):
            mine = [o for o in ops if o.fault_id == fid]
            inj = [o for o in mine if o.action == "inject" and o.outcome != "invoke"]
            heal = [o for o in mine if o.action == "heal" and o.outcome != "invoke"]
            first = mine[0]
            start = inj[0].ts if inj else first.ts
            end = heal[-1].ts if heal else None
            evidence = dict(inj[0].evidence) if inj else {}
            out.append(
                FaultWindow(
                    fid,
                    first.fault_kind,
                    tuple(first.targets),
                    start,
                    end,
                    injected=bool(inj) and inj[0].outcome == "ok",
                    healed=bool(heal) and heal[-1].outcome == "ok",
                    params=dict(first.params),
                    evidence=evidence,
                )
            )
        return out
