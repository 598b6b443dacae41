"""The human-readable report of a chaos run, ``report.md``, rendered from its :class:`~chaos.run_report.RunReport`.

Pure rendering: it reads the report the analysis built (:mod:`chaos.analysis`); nothing starts, stops or heals
anything. The timeline figure beside it: :mod:`chaos.timeline`.

Example:
    from pathlib import Path
    from chaos.report import write_markdown
    from chaos.run_report import RunReport

    run_dir = Path("runs/chaos/kill-one-learner")
    write_markdown(RunReport.read(run_dir / "report.json"), run_dir / "report.md")
"""

from __future__ import annotations

import json
import math
import os
import shlex
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaos.checkers.base import Verdict
from chaos.false_alarm import FalseAlarmQuote
from chaos.formatting import finite, num, status_word
from chaos.history import PlannedFault, Teardown
from chaos.run_report import RunReport
from trainer.metrics import RunSummary

TIMELINE_NAME = "timeline.png"
HISTORY_NAME = "history.jsonl"


def _secs(x: Any) -> str:
    return f"{x:.1f}" if finite(x) else "n/a"


def _cell(x: Any) -> str:
    """Text safe inside a Markdown table cell (no pipes, no line breaks)."""
    text = x if isinstance(x, str) else json.dumps(x, sort_keys=True, default=str)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ").strip()


def _compact(d: Any) -> str:
    if not d:
        return ""
    if isinstance(d, dict):
        return ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in d.items())
    return json.dumps(d, default=str)


def _json_block(obj: Any) -> list[str]:
    text = json.dumps(obj, indent=2, sort_keys=True, default=str)
    return ["```json", *text.splitlines(), "```"]


def replay_command(report: RunReport) -> str:
    """The command that runs this run again (``diloco-chaos replay``, on the backend it ran on).

    Example:
        >>> r = RunReport(scenario="x", status="pass", exit_code=0, run_dir="runs/sim/x 1", seed=1, config_hash="",
        ...               started_at=0.0, wall_s=1.0, backend="sim")
        >>> replay_command(r)
        "diloco-chaos replay 'runs/sim/x 1' --backend sim"
    """
    backend = f" --backend {report.backend}" if report.backend and report.backend != "local" else ""
    return f"diloco-chaos replay {shlex.quote(report.run_dir) if report.run_dir else 'RUN_DIR'}{backend}"


# What the link to a run's Prometheus range graphs (observability/rules.yml, chaos/fault_metrics.py).
PROMETHEUS_PANELS = ("diloco:merges:rate1m", "diloco:compute_goodput:ratio_rate1m", "diloco_fault_active")


def prometheus_range(report: RunReport, base_url: str) -> str:
    """A link to the Prometheus graphs of this run's time range (``docker compose --profile observability``).

    Example:
        >>> r = RunReport(scenario="x", status="pass", exit_code=0, run_dir="r", seed=1, config_hash="",
        ...               started_at=1796284800.0, wall_s=75.2)
        >>> prometheus_range(r, "http://localhost:9090/").split("&")[:3]
        ['http://localhost:9090/graph?g0.expr=diloco%3Amerges%3Arate1m', 'g0.tab=0', 'g0.range_input=96s']
        >>> "g0.end_input=2026-12-03+08%3A01%3A25" in prometheus_range(r, "http://localhost:9090")
        True
    """
    # The range with 10 s either side; its end as the classic UI's g0.end_input (UTC).
    end = datetime.fromtimestamp(report.started_at + report.wall_s + 10, tz=UTC)
    params: list[tuple[str, str]] = []
    for i, expr in enumerate(PROMETHEUS_PANELS):
        params += [
            (f"g{i}.expr", expr),
            (f"g{i}.tab", "0"),
            (f"g{i}.range_input", f"{math.ceil(report.wall_s) + 20}s"),
            (f"g{i}.end_input", end.strftime("%Y-%m-%d %H:%M:%S")),
        ]
    return f"{base_url.rstrip('/')}/graph?{urllib.parse.urlencode(params)}"


def render_markdown(report: RunReport, prometheus_url: str | None = None) -> str:
    """The run's report as Markdown: outcome, checks, faults, key numbers, teardown, how to reproduce.

    The evidence of every check that did not pass is shown as JSON under the
    checks table, so a reader sees why. With ``prometheus_url`` (``$DILOCO_PROMETHEUS_URL``), the artifacts link
    the run's range in that Prometheus (a simulated run has no metrics: no link).

    Example:
        >>> md = render_markdown(RunReport(scenario="kill-one-learner", status="pass", exit_code=0, run_dir="r",
        ...                                seed=1, config_hash="abc", started_at=0.0, wall_s=1.0))
        >>> md.splitlines()[0]
        '# Chaos run: kill-one-learner'
        >>> "diloco-chaos replay r" in md
        True
    """
    name = report.scenario or "unnamed scenario"
    verdicts = report.verdicts
    out: list[str] = [f"# Chaos run: {name}", ""]

    counts = {
        s: sum(1 for v in verdicts if v.status == s) for s in ("pass", "fail", "indeterminate", "not_applicable")
    }
    tally = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n) or "no checks ran"
    out += [f"## Result: {status_word(report.status)}", ""]
    out += [f"{len(verdicts)} checks: {tally} (exit code {report.exit_code}).", ""]
    for w in report.warnings:
        out += [f"> **Warning:** {w}", ""]
    if report.description:
        out += [report.description.strip(), ""]
    if report.status == "error" or report.error:
        out += [
            "**The run did not complete:**",
            "",
            "```text",
            *(report.error or "(no error recorded)").splitlines(),
            "```",
            "",
        ]

    facts = [f"seed `{report.seed}`"]
    if report.config_hash:
        facts.append(f"config `{report.config_hash}`")
    if report.simulated:
        facts.insert(
            0,
            "**simulated** in deterministic mode (surrogate learners on a virtual clock: no process "
            "ran, and its times are not dates)",
        )
        if finite(report.wall_s):
            facts.append(f"virtual time {report.wall_s:.1f} s")
    else:
        if report.backend:
            facts.append(f"backend `{report.backend}`")
        if finite(report.started_at):
            started = datetime.fromtimestamp(report.started_at, tz=UTC)
            facts.append(f"started {started.strftime('%Y-%m-%d %H:%M:%S')} UTC")
        if finite(report.wall_s):
            facts.append(f"wall time {report.wall_s:.1f} s")
    if report.run_dir:
        facts.append(f"run dir `{report.run_dir}`")
    out += ["Run: " + ", ".join(facts) + ".", ""]

    out += _checks_section(verdicts)
    out += _faults_section(report)
    out += _numbers_section(report)
    out += _teardown_section(report.teardown)

    out += [
        "## How to reproduce",
        "",
        "The same faults on the same targets at the same times, from this run "
        "directory's scenario and recorded plan:",
        "",
        "```sh",
        replay_command(report),
        "```",
        "",
    ]
    out += [
        "## Artifacts",
        "",
        f"- [{TIMELINE_NAME}]({TIMELINE_NAME}): eval loss, fault windows and per-learner activity over time",
        f"- [{HISTORY_NAME}]({HISTORY_NAME}): every controller record and trainer event, by time",
        *(
            [
                f"- [Prometheus]({prometheus_range(report, prometheus_url)}): merges, compute goodput and active "
                "faults over this run's time range (`docker compose --profile observability`)"
            ]
            if prometheus_url and not report.simulated and finite(report.started_at)
            else []
        ),
        "",
        f"![timeline]({TIMELINE_NAME})",
        "",
    ]
    return "\n".join(out)


def _checks_section(verdicts: list[Verdict]) -> list[str]:
    out = ["## Checks", ""]
    if not verdicts:
        return out + ["No checks ran.", ""]
    out += ["| check | status | summary |", "|---|---|---|"]
    for v in verdicts:
        out.append(f"| {_cell(v.name)} | {status_word(v.status)} | {_cell(v.summary)} |")
    out.append("")
    for v in verdicts:
        if v.status == "pass":
            continue
        out += [f"### Why `{v.name}` is {status_word(v.status)}", ""]
        if v.summary:
            out += [v.summary, ""]
        out += [*_json_block(v.evidence), ""]
    return out


def _faults_section(report: RunReport) -> list[str]:
    out = ["## Faults", "", "Times are seconds after steady state (the first merge).", ""]
    plan: dict[str, PlannedFault] = {p.fault_id: p for p in report.plan}
    if report.faults:
        out += ["| id | kind | targets | injected at s | healed at s | params |", "|---|---|---|---|---|---|"]
        for f in report.faults:
            planned = plan.get(f.fault_id)
            params = f.params or (planned.params if planned else {})
            injected = _secs(f.start_s) + ("" if f.injected else " (inject failed)")
            if finite(f.end_s):
                healed = _secs(f.end_s) + ("" if f.healed else " (heal failed)")
            else:
                healed = "never healed"
            targets = ", ".join(f.targets) or "-"
            out.append(
                f"| {_cell(f.fault_id)} | {_cell(f.kind)} | {_cell(targets)} | {injected} | {healed} "
                f"| {_cell(_compact(params)) or '-'} |"
            )
        out.append("")
    else:
        out += ["No fault was injected.", ""]
    if report.not_run:
        out += ["Planned but not run:", ""]
        for fid in report.not_run:
            out.append(f"- `{fid}`" + (f": {_when(plan[fid])}" if fid in plan else ""))
        out.append("")
    return out


def _when(p: PlannedFault) -> str:
    """What a planned fault would have been: its kind, its targets, and when it was due."""
    when = (
        f"at merge {p.at_merge}" if p.at_merge is not None else f"at {_secs(p.at)} s" if p.at is not None else ""
    )
    return " ".join(x for x in (p.kind, ", ".join(p.targets), when) if x)


def _numbers_section(report: RunReport) -> list[str]:
    m, baseline = report.metrics, report.baseline
    out = ["## Key numbers", ""]
    final = m.final_eval_loss
    base = baseline.final_eval_loss if baseline else None
    if baseline is None:
        vs = "no baseline"
    elif finite(final) and finite(base):
        delta = final - base
        rel = f", {delta / base:+.1%}" if base else ""
        vs = f"{num(base)} (delta {delta:+.3f}{rel})"
    else:
        vs = num(base)
    if baseline is not None and baseline.cached:
        vs += ", cached"
    parity = next((v.evidence for v in report.verdicts if v.name == "parity"), {})
    band = parity.get("band")
    seeds = baseline.band.seeds if baseline and baseline.band else []
    if isinstance(band, dict) and finite(band.get("low")) and finite(band.get("high")) and len(seeds) > 1:
        band_cell = (
            f"{num(band['low'])} – {num(band['high'])} (this run's floor + the fault-free excess at "
            f"cluster seeds {', '.join(map(str, seeds))})"
        )
    else:
        band_cell = "one baseline" if baseline is not None else "n/a"
    rej = ", ".join(f"{k}: {v}" for k, v in sorted(m.rejections.items())) or "none"
    rows = [
        ("final eval loss", num(final)),
        ("baseline final eval loss", vs),
        ("fault-free band (parity)", band_cell),
        ("parity false-alarm rate", _false_alarm_cell(report.parity_false_alarm)),
        ("loss floor", num(m.loss_floor)),
        ("merges", num(m.merges)),
        *token_rows(m),
        ("rejections", rej),
        ("wall time", f"{m.wall_s:.1f} s" if finite(m.wall_s) else "n/a"),
    ]
    out += ["| metric | value |", "|---|---|", *(f"| {k} | {_cell(v)} |" for k, v in rows), ""]
    return out


def token_rows(m: RunSummary) -> list[tuple[str, str]]:
    """The token figures, each named by what it counts (trainer.metrics): trained tokens — the learners' own count,
    the syncer's toward the budget, those merges took — and contribution tokens (a trained token sent for one
    fragment), uploaded and merged. Figures of one kind add up; the two kinds are never one figure.

    >>> rows = dict(token_rows(RunSummary(tokens_total=900, trained_tokens=1000, trained_tokens_merged=800,
    ...                                   contribution_tokens_uploaded=4000, contribution_tokens_merged=3200)))
    >>> rows["trained tokens merged (compute goodput)"], rows["contribution tokens merged of uploaded"]
    ('800 (80.0% of trained)', '3,200 of 4,000 (80.0%)')
    """
    trained = m.trained_tokens
    share = f" ({m.trained_tokens_merged / trained:.1%} of trained)" if trained else ""
    sent = m.contribution_tokens_uploaded
    return [
        ("trained tokens (the learners' own count)", num(trained)),
        ("trained tokens the syncer counted (the budget's count)", num(m.tokens_total)),
        ("trained tokens merged (compute goodput)", f"{num(m.trained_tokens_merged)}{share}"),
        (
            "contribution tokens merged of uploaded",
            f"{num(m.contribution_tokens_merged)} of {num(sent)}"
            + (f" ({m.contribution_tokens_merged / sent:.1%})" if sent else ""),
        ),
    ]


def _false_alarm_cell(rate: FalseAlarmQuote | None) -> str:
    """chaos.false_alarm's text, with the benchmark named so a reader can measure it again."""
    if rate is None:
        return "n/a (parity off)"
    return (
        f"{rate.text}, {rate.measured} (benchmarks/calibration/parity_false_alarm.py)"
        if rate.measured
        else rate.text
    )


def _teardown_section(teardown: Teardown) -> list[str]:
    out = ["## Teardown", ""]
    left = [
        ("proxies left", teardown.proxies_left),
        ("processes left", teardown.processes_left),
        ("problems", teardown.problems),
    ]
    if not any(items for _, items in left):
        return out + ["Clean: no proxies or processes were left, no problems.", ""]
    out += ["**Not clean:**", ""]
    out += [f"- {label}: " + "; ".join(items) for label, items in left if items]
    return out + [""]


def write_markdown(report: RunReport, path: Path) -> None:
    """Write :func:`render_markdown` of ``report`` to ``path`` (parents created), linking the Prometheus of
    ``$DILOCO_PROMETHEUS_URL`` when that is set.

    Example:
        write_markdown(RunReport.read(Path("runs/x/report.json")), Path("runs/x/report.md"))
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(report, os.environ.get("DILOCO_PROMETHEUS_URL")), encoding="utf-8")


# ---- timeline -----------------------------------------------------------------
