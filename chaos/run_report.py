"""The run report, ``report.json``: what a finished run was, what its checks said, and the numbers behind them.

:func:`chaos.analysis.analyse` builds a :class:`RunReport`; ``report.md`` (:mod:`chaos.report`) and the timeline
render from it, and readers of ``report.json`` read it back with :meth:`RunReport.read`, which refuses a report
of another ``schema_version``. The records it holds that other files share live with those files: the planned
faults and the teardown with the history (:mod:`chaos.history`), the metrics summary with the trainer
(:mod:`trainer.metrics`), the false-alarm quote with its measurement (:mod:`chaos.false_alarm`), the
verdicts with the checkers.

Example:
    report = RunReport.read("runs/chaos/kill-one-learner/report.json")  # Record.read: validated
    print(report.status, [v.name for v in report.verdicts if v.status != "pass"], report.teardown.proxies_left)
"""

from __future__ import annotations

from typing import Literal

from pydantic import SerializerFunctionWrapHandler, field_validator, model_serializer

from chaos.checkers.base import Verdict
from chaos.false_alarm import FalseAlarmQuote
from chaos.history import PlannedFault, Teardown
from chaos.records import JsonObject, Record, SparseRecord
from trainer.metrics import RunSummary

# report.json's layout: raised when a field changes meaning or goes away (readers check it), not when one is added.
REPORT_SCHEMA_VERSION = 2  # 2 (2026-12-03): metrics.goodput_tokens renamed uploads_merged (it is no goodput)


class FaultRow(Record):
    """When one fault was in effect, in seconds after steady state (``end_s`` None: it never healed)."""

    fault_id: str
    kind: str
    targets: list[str]
    start_s: float
    end_s: float | None
    injected: bool  # its inject reported ok
    healed: bool  # its heal reported ok
    params: JsonObject = {}


class Band(SparseRecord):
    """The fault-free runs parity judges against: each cluster seed's final loss, entropy floor and excess."""

    seeds: list[int] = []
    losses: list[float] = []
    floors: list[float | None] = []
    excess: list[float] = []  # each loss over its band origin (chaos.checkers.parity.band_origin)
    goodputs: list[float] = []  # each run's compute goodput (the goodput check's bound); empty: not measured


class Baseline(SparseRecord):
    """A fault-free run's record: the baseline (its seeds' band and other runs too) or the reference.

    The controller writes where it ran and whether it came from the cache; deterministic mode only the loss and
    that it was simulated; a run directory from before bands has no band.
    """

    seed: int | None = None
    final_eval_loss: float
    loss_floor: float | None = None
    run_dir: str | None = None
    cached: bool = False
    config_hash: str = ""
    band: Band | None = None
    runs: list[Baseline] = []  # the band's other seeds
    simulated: bool = False


RunStatus = Literal["pass", "fail", "indeterminate", "error"]


class RunReport(Record):
    """One run's report, ``report.json``. Field order is the file's key order."""

    schema_version: int = REPORT_SCHEMA_VERSION
    scenario: str
    description: str = ""
    status: RunStatus
    exit_code: int
    run_dir: str
    seed: int
    config_hash: str
    started_at: float  # Unix time of the run's first record (simulated: the virtual clock's, not a date)
    wall_s: float
    backend: str = ""  # local, docker or sim (deterministic mode); "" for a run directory that did not record it
    verdicts: list[Verdict] = []
    warnings: list[str] = []  # outside the regime the checks were calibrated for (chaos.regime)
    plan: list[PlannedFault] = []
    faults: list[FaultRow] = []
    not_run: list[str] = []  # planned fault ids that never started
    baseline: Baseline | None = None
    reference: Baseline | None = None  # the synchronous-DiLoCo reference, when that check ran
    parity_false_alarm: FalseAlarmQuote | None = None  # None: parity off
    metrics: RunSummary = RunSummary()
    teardown: Teardown = Teardown()
    error: str | None = None  # why a run did not complete, when one is recorded; not written when None

    @property
    def simulated(self) -> bool:
        """Deterministic mode: a virtual clock, surrogate learners; no process ran."""
        return self.backend == "sim"

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != REPORT_SCHEMA_VERSION:
            raise ValueError(
                f"report.json schema_version {v} is not {REPORT_SCHEMA_VERSION}, the one this "
                "version of diloco-chaos reads"
            )
        return v

    @model_serializer(mode="wrap")
    def _without_error(self, handler: SerializerFunctionWrapHandler) -> JsonObject:
        data = handler(self)
        if self.error is None:
            data.pop("error", None)
        return data
