"""Judge a finished run directory: the checks, the regime warnings, the metrics summary, and the reports.

What the controller does once a real run has ended, what deterministic mode does
with the run directory it writes, and what ``diloco-chaos report`` re-runs over
a run directory gathered from anywhere: it reads files, never a process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chaos.audit_files import AuditFiles, reexecution_inputs
from chaos.checkers import CheckInput, RunFacts, Verdict, overall, run_checks
from chaos.checkers.parity import tolerance_of
from chaos.false_alarm import FalseAlarmQuote, cluster_key, measured_rate
from chaos.history import History, Teardown
from chaos.regime import regime_warnings
from chaos.run_report import REPORT_SCHEMA_VERSION, Baseline, FaultRow, RunReport
from chaos.scenario import Scenario
from trainer import events as ev
from trainer.metrics import summarize_run

__all__ = ["REPORT_SCHEMA_VERSION", "RunResult", "analyse"]  # the version's home: chaos.run_report


@dataclass
class RunResult:
    out_dir: Path
    exit_code: int
    status: str
    verdicts: list[Verdict]
    report: RunReport


def _relative_faults(history: History, steady: float) -> list[FaultRow]:
    return [
        FaultRow(
            fault_id=w.fault_id,
            kind=w.kind,
            targets=list(w.targets),
            start_s=round(w.start - steady, 3),
            end_s=None if w.end is None else round(w.end - steady, 3),
            injected=w.injected,
            healed=w.healed,
            params=w.params,
        )
        for w in history.fault_windows()
    ]


def analyse(
    scenario: Scenario, out_dir: Path, baseline: Baseline | None, reference: Baseline | None = None
) -> RunResult:
    """Checks and reports over a finished run directory (also what ``diloco-chaos report`` re-runs)."""
    history = History.read(out_dir)
    history.write_merged(out_dir / "history.jsonl")
    cfg = scenario.cluster
    facts = RunFacts.of(scenario)
    base_loss = baseline.final_eval_loss if baseline else None
    band = tuple(baseline.band.excess) if baseline and baseline.band else ()  # a run directory from before bands
    ref_loss = reference.final_eval_loss if reference else None
    goodputs = tuple(baseline.band.goodputs) if baseline and baseline.band else ()
    initial, final = reexecution_inputs(cfg, history, out_dir)
    verdicts = run_checks(
        CheckInput(
            history,
            facts,
            scenario.checks,
            base_loss,
            ref_loss,
            band,
            audit_files=AuditFiles(out_dir),
            baseline_goodput=goodputs,
            initial_params=initial,
            final_checkpoint=final,
        )
    )
    status, code = overall(verdicts)
    steady_phase = history.phase("steady")
    steady = steady_phase.ts if steady_phase else history.start
    plan = history.plan()
    injected = [w.start for w in history.fault_windows() if w.injected]
    warnings = regime_warnings(
        _merged_ids(history),
        first_fault=min(injected, default=None),
        learners=cfg.algorithm.num_learners,
        mode=cfg.algorithm.mode,
        baseline=_baseline_merges(baseline),
    )
    report = RunReport(
        scenario=scenario.name,
        description=scenario.description,
        status=status,
        exit_code=code,
        run_dir=str(out_dir),
        seed=scenario.seed,
        config_hash=cfg.config_hash(),
        started_at=history.start,
        wall_s=round(history.end - history.start, 3),
        backend=history.backend(),
        verdicts=verdicts,
        warnings=warnings,
        plan=plan.faults if plan else [],
        faults=_relative_faults(history, steady),
        not_run=history.not_run(),
        baseline=baseline,
        reference=reference,
        parity_false_alarm=_false_alarm(scenario, band),
        metrics=summarize_run(out_dir).summary(),
        teardown=history.teardown() or Teardown(),
    )
    _write_reports(out_dir, history, report)
    return RunResult(out_dir, code, status, verdicts, report)


def _merged_ids(history: History) -> list[tuple[float, list[str]]]:
    """Each merge as (time, the ids of the learners it took), in time order (what chaos.regime reads)."""
    return [(m.ts, [p.learner_id for p in m.participants]) for m in history.of(ev.Merge)]


def _baseline_merges(baseline: Baseline | None) -> list[tuple[float, list[str]]] | None:
    """The same-seed baseline's merges, when its run directory is readable here (None: no baseline, or it is
    not: a report re-run on another machine)."""
    run_dir = Path(baseline.run_dir) if baseline and baseline.run_dir else None
    return _merged_ids(History.read(run_dir)) if run_dir and (run_dir / "events").is_dir() else None


def _false_alarm(scenario: Scenario, band: tuple[float, ...]) -> FalseAlarmQuote | None:
    """The measured rate at which parity fails a fault-free run at this run's tolerance (None: parity off, or a
    derived tolerance without a band to derive it from)."""
    parity = scenario.checks.parity
    tolerance = tolerance_of(parity, band) if parity.enabled else None
    if tolerance is None:
        return None
    return measured_rate(
        tolerance=tolerance, baseline_seeds=parity.baseline_seeds, cluster=cluster_key(scenario.cluster)
    )


def _write_reports(out_dir: Path, history: History, report: RunReport) -> None:
    from chaos.report import write_markdown
    from chaos.timeline import write_timeline  # matplotlib is slow to import: only when reporting

    report.write(out_dir / "report.json")
    write_markdown(report, out_dir / "report.md")
    write_timeline(history, report, out_dir / "timeline.png")
