"""The human-readable report of a chaos run, ``report.md``, rendered from the parsed ``report.json``.

Pure rendering: it reads the report the analysis built (:mod:`chaos.analysis`); nothing starts, stops or heals
anything. The timeline figure beside it: :mod:`chaos.timeline`.

Example:
    import json
    from pathlib import Path
    from chaos.report import write_markdown

    run_dir = Path("runs/chaos/kill-one-learner")
    write_markdown(json.loads((run_dir / "report.json").read_text()), run_dir / "report.md")
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from chaos.formatting import finite, num, status_word

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


def render_markdown(report: dict[str, Any]) -> str:
    """The run's report as Markdown: outcome, checks, faults, key numbers, teardown, how to reproduce.

    ``report`` is the parsed ``report.json``; optional keys may be missing or null.
    The evidence of every check that did not pass is shown as JSON under the
    checks table, so a reader sees why.

    Example:
        >>> md = render_markdown({"scenario": "kill-one-learner", "status": "pass", "seed": 1})
        >>> md.splitlines()[0]
        '# Chaos run: kill-one-learner'
        >>> "diloco-chaos run kill-one-learner --seed 1" in md
        True
    """
    name = str(report.get("scenario") or "unnamed scenario")
    status = str(report.get("status") or "unknown")
    verdicts: list[dict[str, Any]] = list(report.get("verdicts") or [])
    out: list[str] = [f"# Chaos run: {name}", ""]

    counts = {s: sum(1 for v in verdicts if v.get("status") == s) for s in ("pass", "fail", "indeterminate")}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no checks ran"
    out += [f"## Result: {status_word(status)}", ""]
    exit_code = report.get("exit_code")
    out += [f"{len(verdicts)} checks: {tally}" + (f" (exit code {exit_code})" if exit_code is not None else "") + ".",
            ""]
    for w in report.get("warnings") or []:
        out += [f"> **Warning:** {w}", ""]
    if report.get("description"):
        out += [str(report["description"]).strip(), ""]
    if status == "error" or report.get("error"):
        out += ["**The run did not complete:**", "", "```text", *str(report.get("error") or "(no error recorded)")
                .splitlines(), "```", ""]

    facts = []
    if report.get("seed") is not None:
        facts.append(f"seed `{report['seed']}`")
    if report.get("config_hash"):
        facts.append(f"config `{report['config_hash']}`")
    if finite(report.get("started_at")):
        started = datetime.fromtimestamp(report["started_at"], tz=timezone.utc)
        facts.append(f"started {started.strftime('%Y-%m-%d %H:%M:%S')} UTC")
    if finite(report.get("wall_s")):
        facts.append(f"wall time {report['wall_s']:.1f} s")
    if report.get("run_dir"):
        facts.append(f"run dir `{report['run_dir']}`")
    if facts:
        out += ["Run: " + ", ".join(facts) + ".", ""]

    out += _checks_section(verdicts)
    out += _faults_section(report)
    out += _numbers_section(report)
    out += _teardown_section(report.get("teardown"))

    seed = report.get("seed")
    out += ["## How to reproduce", "", "```sh",
            f"diloco-chaos run {name}" + (f" --seed {seed}" if seed is not None else ""), "```", ""]
    out += ["## Artifacts", "",
            f"- [{TIMELINE_NAME}]({TIMELINE_NAME}): eval loss, fault windows and per-learner activity over time",
            f"- [{HISTORY_NAME}]({HISTORY_NAME}): every controller record and trainer event, by time", "",
            f"![timeline]({TIMELINE_NAME})", ""]
    return "\n".join(out)


def _checks_section(verdicts: list[dict[str, Any]]) -> list[str]:
    out = ["## Checks", ""]
    if not verdicts:
        return out + ["No checks ran.", ""]
    out += ["| check | status | summary |", "|---|---|---|"]
    for v in verdicts:
        out.append(f"| {_cell(v.get('name', '?'))} | {status_word(v.get('status'))} | {_cell(v.get('summary', ''))} |")
    out.append("")
    for v in verdicts:
        if v.get("status") in ("pass", None):
            continue
        out += [f"### Why `{v.get('name', '?')}` is {status_word(v.get('status'))}", ""]
        if v.get("summary"):
            out += [str(v["summary"]), ""]
        out += [*_json_block(v.get("evidence") or {}), ""]
    return out


def _faults_section(report: dict[str, Any]) -> list[str]:
    out = ["## Faults", "", "Times are seconds after steady state (the first merge)."]
    plan = {str(p.get("fault_id")): p for p in (report.get("plan") or []) if isinstance(p, dict)}
    faults: list[dict[str, Any]] = list(report.get("faults") or [])
    out.append("")
    if faults:
        out += ["| id | kind | targets | injected at s | healed at s | params |", "|---|---|---|---|---|---|"]
        for f in faults:
            fid = str(f.get("fault_id", "?"))
            planned = plan.get(fid, {})
            params = f.get("params", planned.get("params")) or {}
            injected = _secs(f.get("start_s"))
            if f.get("injected") is False:
                injected += " (inject failed)"
            if finite(f.get("end_s")):
                healed = _secs(f.get("end_s")) + (" (heal failed)" if f.get("healed") is False else "")
            else:
                healed = "never healed"
            targets = ", ".join(str(t) for t in (f.get("targets") or planned.get("targets") or [])) or "-"
            kind = f.get("kind") or planned.get("kind") or "?"
            out.append(f"| {_cell(fid)} | {_cell(kind)} | {_cell(targets)} | {injected} | {healed} "
                       f"| {_cell(_compact(params)) or '-'} |")
        out.append("")
    else:
        out += ["No fault was injected.", ""]
    not_run = [str(x) for x in (report.get("not_run") or [])]
    if not_run:
        out += ["Planned but not run:", ""]
        for fid in not_run:
            p = plan.get(fid, {})
            when = (f"at merge {p['at_merge']}" if p.get("at_merge") is not None
                    else f"at {_secs(p.get('at'))} s" if p.get("at") is not None else "")
            what = " ".join(x for x in (str(p.get("kind") or ""), ", ".join(map(str, p.get("targets") or [])), when)
                            if x)
            out.append(f"- `{fid}`" + (f": {what}" if what else ""))
        out.append("")
    return out


def _numbers_section(report: dict[str, Any]) -> list[str]:
    m: dict[str, Any] = dict(report.get("metrics") or {})
    baseline = report.get("baseline") or None
    out = ["## Key numbers", ""]
    if not m and not baseline:
        return out + ["No metrics recorded.", ""]
    final = m.get("final_eval_loss")
    base = baseline.get("final_eval_loss") if isinstance(baseline, dict) else None
    if finite(final) and finite(base):
        delta = final - base
        rel = f", {delta / base:+.1%}" if base else ""
        vs = f"{num(base)} (delta {delta:+.3f}{rel})"
    elif isinstance(baseline, dict):
        vs = num(base)
    else:
        vs = "no baseline"
    if isinstance(baseline, dict) and baseline.get("cached"):
        vs += ", cached"
    parity = next((v.get("evidence") or {} for v in report.get("verdicts") or [] if v.get("name") == "parity"), {})
    band = parity.get("band") if isinstance(parity, dict) else None
    seeds = ((baseline.get("band") or {}).get("seeds") or []) if isinstance(baseline, dict) else []
    if isinstance(band, dict) and finite(band.get("low")) and finite(band.get("high")) and len(seeds) > 1:
        band_cell = (f"{num(band['low'])} – {num(band['high'])} (this run's floor + the fault-free excess at "
                     f"cluster seeds {', '.join(map(str, seeds))})")
    else:
        band_cell = "one baseline" if isinstance(baseline, dict) else "n/a"
    goodput = m.get("goodput_tokens")
    rejections = m.get("rejections")
    if isinstance(rejections, dict):
        rej = ", ".join(f"{k}: {v}" for k, v in sorted(rejections.items())) or "none"
    else:
        rej = num(rejections)
    wall = m.get("wall_s", report.get("wall_s"))
    rows = [
        ("final eval loss", num(final)),
        ("baseline final eval loss", vs),
        ("fault-free band (parity)", band_cell),
        ("parity false-alarm rate", _false_alarm_cell(report.get("parity_false_alarm"))),
        ("loss floor", num(m.get("loss_floor"))),
        ("merges", num(m.get("merges"))),
        ("tokens merged", num(m.get("tokens_total"))),
        ("uploads merged (merged / uploaded tokens)", f"{goodput:.1%}" if finite(goodput) else "n/a"),
        ("rejections", rej),
        ("wall time", f"{wall:.1f} s" if finite(wall) else "n/a"),
    ]
    out += ["| metric | value |", "|---|---|", *(f"| {k} | {_cell(v)} |" for k, v in rows), ""]
    return out


def _false_alarm_cell(rate: Any) -> str:
    """chaos.checkers.false_alarm's text, with the benchmark named so a reader can measure it again."""
    if not isinstance(rate, dict):
        return "n/a (parity off)" if rate is None else "n/a"
    text = str(rate.get("text", "n/a"))
    return f"{text}, {rate['measured']} (benchmarks/parity_false_alarm.py)" if rate.get("measured") else text


def _teardown_section(teardown: Any) -> list[str]:
    out = ["## Teardown", ""]
    if not isinstance(teardown, dict):
        return out + ["Not recorded.", ""]
    labels = (("proxies_left", "proxies left"), ("processes_left", "processes left"), ("problems", "problems"))
    left = [(label, list(teardown.get(key) or [])) for key, label in labels]
    if not any(items for _, items in left):
        return out + ["Clean: no proxies or processes were left, no problems.", ""]
    out += ["**Not clean:**", ""]
    for label, items in left:
        if items:
            out.append(f"- {label}: " + "; ".join(x if isinstance(x, str) else json.dumps(x, default=str)
                                                  for x in items))
    return out + [""]


def write_markdown(report: dict[str, Any], path: Path) -> None:
    """Write :func:`render_markdown` of ``report`` to ``path`` (parents created).

    Example:
        write_markdown(json.loads(Path("runs/x/report.json").read_text()), Path("runs/x/report.md"))
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(report), encoding="utf-8")


# ---- timeline -----------------------------------------------------------------
