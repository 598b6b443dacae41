"""When each planned fault is injected and healed: the one interpreter of a fault plan.

The controller drives it from its polling loop on the wall clock, deterministic
mode from its event loop on the virtual clock; both do what it says, in its
order, and record it. A fault starts ``at`` seconds after the steady-state
origin or once the syncer's merge count reaches ``at_merge``, and heals
``duration`` seconds after it started. Once the result is fixed (the token
budget reached: a settle phase may follow) no fault starts. When the run ends,
faults never started are "not run", and active ones heal with
``why="run finished"`` — except kinds whose heal restarts a unit
(:data:`faults.kinds.KINDS`), which are skipped: there is nothing to restart
into.

Times are in the driver's clock; the origin is added to ``at`` exactly as the
driver would add it, so a driver that wakes at :meth:`PlanInterpreter.next_time`
finds the fault due. Both drivers take a step and record it with :func:`carry_out`
(``invoke``, then ``ok`` with the evidence or ``fail`` with the error).

Example:
    >>> from chaos.scenario import parse_scenario
    >>> from chaos.fault_plan import plan
    >>> s = parse_scenario({"name": "x", "schedule": [{"fault": "kill", "targets": ["learner-0"], "at": 2,
    ...                                                 "duration": 3}]})
    >>> run = PlanInterpreter(plan(s), origin=100.0)
    >>> run.next_time(), run.due(now=101.0, merges=1)
    (102.0, [])
    >>> [type(s).__name__ for s in run.due(now=102.0, merges=2)], run.next_time()
    (['Inject'], 105.0)
    >>> [(type(s).__name__, s.skip) for s in run.finish()]  # a kill's heal would restart a learner: skipped
    [('Heal', True)]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chaos.fault_plan import Planned
from chaos.history import FaultOp
from chaos.records import JsonObject
from faults.kinds import KINDS

RUN_FINISHED = "run finished"
SKIPPED: JsonObject = {"skipped": "training finished; teardown stops every process"}  # a skipped heal's evidence


@dataclass(frozen=True)
class Inject:
    planned: Planned


@dataclass(frozen=True)
class Heal:
    planned: Planned
    why: str = ""  # "" when its duration is up; "run finished" or "teardown" otherwise
    skip: bool = False  # training finished and this heal would restart a unit: record it, do nothing


Step = Inject | Heal


class PlanInterpreter:
    """Which planned faults start and heal now; holds what is pending and what is active (and since when)."""

    def __init__(self, planned: list[Planned], origin: float) -> None:
        self.origin = origin
        self.pending: list[Planned] = list(planned)
        self.active: dict[str, tuple[Planned, float]] = {}

    def _starts(self, p: Planned, now: float, merges: int) -> bool:
        return (p.at is not None and now >= self.origin + p.at) or (
            p.at_merge is not None and merges >= p.at_merge
        )

    def due(self, now: float, merges: int, result_fixed: bool = False) -> list[Step]:
        """The steps to take now, in order: injections (plan order), then heals whose duration is up."""
        steps: list[Step] = []
        for p in [] if result_fixed else list(self.pending):
            if self._starts(p, now, merges):
                self.pending.remove(p)
                self.active[p.fault_id] = (p, now)
                steps.append(Inject(p))
        for fid, (p, started) in list(self.active.items()):
            if now >= started + p.duration:
                del self.active[fid]
                steps.append(Heal(p))
        return steps

    def next_time(self) -> float | None:
        """The earliest time at which a step falls due by the clock alone (None: only merges or nothing left)."""
        times = [self.origin + p.at for p in self.pending if p.at is not None]
        times += [started + p.duration for p, started in self.active.values()]
        return min(times) if times else None

    def finish(self, why: str = RUN_FINISHED) -> list[Heal]:
        """The run ended (``why``: it finished, or it is being torn down after an error or a signal): heal every
        active fault; a heal that would restart a unit is skipped, since teardown stops every process anyway."""
        steps = [
            Heal(p, RUN_FINISHED, skip=True) if KINDS[p.kind].restarts else Heal(p, why)
            for p, _ in self.active.values()
        ]
        self.active.clear()
        return steps

    def not_run(self) -> list[str]:
        """The fault ids that never started."""
        return [p.fault_id for p in self.pending]


def carry_out(
    step: Step,
    act: Callable[[], JsonObject | None],
    record: Callable[[FaultOp], object],
    *,
    errors: tuple[type[Exception], ...] = (),
    description: str = "",
    clock: Callable[[], float] | None = None,
) -> str | None:
    """Take one step of the plan and record it, as the controller and deterministic mode both do: ``invoke`` (a
    heal with its ``why``), then ``act()`` and ``ok`` with its evidence, or ``fail`` with the message of one of
    ``errors`` it raised (returned; None when it did not fail). A skipped heal is recorded, not acted on.
    ``description``: the injector's; ``clock``: the records' time (default: the wall clock).

    >>> from chaos.fault_plan import plan
    >>> from chaos.scenario import parse_scenario
    >>> [p] = plan(parse_scenario({"name": "x", "schedule": [{"fault": "pause", "targets": ["learner-0"], "at": 1,
    ...                                                          "duration": 2}]}))
    >>> ops = []
    >>> carry_out(Heal(p, why="teardown"), lambda: {"resumed": ["learner-0"]}, ops.append, clock=lambda: 5.0)
    >>> [(o.action, o.outcome, o.evidence, o.ts) for o in ops]
    [('heal', 'invoke', {'why': 'teardown'}, 5.0), ('heal', 'ok', {'resumed': ['learner-0']}, 5.0)]
    """
    p = step.planned
    action = "inject" if isinstance(step, Inject) else "heal"

    def op(outcome: str, evidence: JsonObject | None = None, error: str = "") -> None:
        fields = dict(
            fault_id=p.fault_id,
            fault_kind=p.kind,
            action=action,
            outcome=outcome,
            targets=list(p.targets),
            params=p.params,
            evidence=evidence or {},
            error=error,
            description=description,
        )
        record(FaultOp(**fields) if clock is None else FaultOp(ts=clock(), **fields))

    why = step.why if isinstance(step, Heal) else ""
    op("invoke", {"why": why} if why else None)
    if isinstance(step, Heal) and step.skip:
        op("ok", SKIPPED)
        return None
    try:
        evidence = act()
    except errors as err:
        op("fail", error=str(err))
        return str(err)
    op("ok", evidence)
    return None
