"""Human-readable artifacts of a chaos run: ``report.md`` and ``timeline.png``.

Pure rendering: everything here reads the parsed ``report.json`` (built by the
controller) and the run's :class:`~chaos.history.History`; nothing starts,
stops or heals anything. matplotlib is imported only by :func:`write_timeline`
(with the non-interactive Agg backend), so the Markdown report works without it.

Example:
    import json
    from pathlib import Path
    from chaos.history import History
    from chaos.report import write_markdown, write_timeline

    run_dir = Path("runs/chaos/kill-one-learner")
    report = json.loads((run_dir / "report.json").read_text())
    write_markdown(report, run_dir / "report.md")
    write_timeline(History.read(run_dir), report, run_dir / "timeline.png")
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from chaos.history import FaultWindow, History, Phase
from faults.base import SYNCER
from faults.kinds import KINDS
from trainer import events as ev

STATUS_WORDS = {"pass": "PASS", "fail": "FAIL", "indeterminate": "INDETERMINATE", "error": "ERROR"}
STATUS_COLOURS = {"pass": "tab:green", "fail": "tab:red", "indeterminate": "tab:orange", "error": "tab:purple"}
FAMILY_COLOURS = {"process": "tab:red", "network": "tab:blue"}

TIMELINE_NAME = "timeline.png"
HISTORY_NAME = "history.jsonl"


# ---- small helpers ---------------------------------------------------------
def status_word(status: str | None) -> str:
    """The upper-case word for a run or check status (``"fail"`` -> ``"FAIL"``); unknown ones are upper-cased.

    Example:
        >>> status_word("indeterminate")
        'INDETERMINATE'
    """
    s = (status or "unknown").lower()
    return STATUS_WORDS.get(s, s.upper())


def fault_family(kind: str) -> str:
    """What a fault acts on (:data:`faults.kinds.KINDS`): ``"process"`` or ``"network"`` (also for a kind this
    version does not know, e.g. in an older run's history).

    Example:
        >>> fault_family("kill"), fault_family("partition"), fault_family("disconnect")
        ('process', 'network', 'network')
    """
    k = KINDS.get(kind)
    return k.family if k else "network"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _num(x: Any, digits: int = 3) -> str:
    """A number for a table: ``n/a`` for None/NaN, integers with thousands separators."""
    if isinstance(x, bool) or x is None:
        return "n/a" if x is None else str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "n/a"
        return f"{x:.{digits}f}"
    return str(x)


def _secs(x: Any) -> str:
    return f"{x:.1f}" if _finite(x) else "n/a"


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


def _natural_key(s: str) -> list[Any]:
    """``learner-10`` after ``learner-2``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


# ---- Markdown ---------------------------------------------------------------
def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], cell: Callable[[Any], str] = str) -> str:
    """A Markdown table; ``cell`` turns each value into its text.

    Example:
        >>> print(markdown_table(["mode", "s"], [["decoupled", 1.5]]))
        | mode | s |
        |---|---|
        | decoupled | 1.5 |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def new_figure(width: float = 8.0, height: float = 4.5, ncols: int = 1) -> tuple[Any, Any]:
    """A matplotlib (Agg) figure and its axes; matplotlib is imported only when a figure is made."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(1, ncols)


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Lay out and write ``fig`` as a PNG, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path


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
    if _finite(report.get("started_at")):
        started = datetime.fromtimestamp(report["started_at"], tz=timezone.utc)
        facts.append(f"started {started.strftime('%Y-%m-%d %H:%M:%S')} UTC")
    if _finite(report.get("wall_s")):
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
            if _finite(f.get("end_s")):
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
    if _finite(final) and _finite(base):
        delta = final - base
        rel = f", {delta / base:+.1%}" if base else ""
        vs = f"{_num(base)} (delta {delta:+.3f}{rel})"
    elif isinstance(baseline, dict):
        vs = _num(base)
    else:
        vs = "no baseline"
    if isinstance(baseline, dict) and baseline.get("cached"):
        vs += ", cached"
    parity = next((v.get("evidence") or {} for v in report.get("verdicts") or [] if v.get("name") == "parity"), {})
    band = parity.get("band") if isinstance(parity, dict) else None
    seeds = ((baseline.get("band") or {}).get("seeds") or []) if isinstance(baseline, dict) else []
    if isinstance(band, dict) and _finite(band.get("low")) and _finite(band.get("high")) and len(seeds) > 1:
        band_cell = (f"{_num(band['low'])} – {_num(band['high'])} (this run's floor + the fault-free excess at "
                     f"cluster seeds {', '.join(map(str, seeds))})")
    else:
        band_cell = "one baseline" if isinstance(baseline, dict) else "n/a"
    goodput = m.get("goodput_tokens")
    rejections = m.get("rejections")
    if isinstance(rejections, dict):
        rej = ", ".join(f"{k}: {v}" for k, v in sorted(rejections.items())) or "none"
    else:
        rej = _num(rejections)
    wall = m.get("wall_s", report.get("wall_s"))
    rows = [
        ("final eval loss", _num(final)),
        ("baseline final eval loss", vs),
        ("fault-free band (parity)", band_cell),
        ("parity false-alarm rate", _false_alarm_cell(report.get("parity_false_alarm"))),
        ("loss floor", _num(m.get("loss_floor"))),
        ("merges", _num(m.get("merges"))),
        ("tokens merged", _num(m.get("tokens_total"))),
        ("uploads merged (merged / uploaded tokens)", f"{goodput:.1%}" if _finite(goodput) else "n/a"),
        ("rejections", rej),
        ("wall time", f"{wall:.1f} s" if _finite(wall) else "n/a"),
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
def timeline_origin(history: History) -> float:
    """The timeline's zero: the ``steady`` phase's timestamp, else the history's first timestamp (0.0 if empty).

    Example:
        >>> timeline_origin(History(records=[Phase(ts=100.0, name="steady")], events=[]))
        100.0
    """
    steady = history.phase("steady")
    return steady.ts if isinstance(steady, Phase) else history.start


def relative_times(history: History, stamps: list[float]) -> list[float]:
    """Wall-clock ``stamps`` as seconds relative to :func:`timeline_origin` (negative: before steady state).

    Example:
        >>> h = History(records=[Phase(ts=100.0, name="steady")], events=[])
        >>> relative_times(h, [95.0, 112.5])
        [-5.0, 12.5]
    """
    t0 = timeline_origin(history)
    return [t - t0 for t in stamps]


def learner_lanes(history: History) -> list[str]:
    """Every learner id seen in the events or targeted by a fault, naturally sorted (``learner-2`` < ``learner-10``).

    Example:
        >>> learner_lanes(History(records=[], events=[ev.Join(learner_id="learner-1", learner_incarnation="a",
        ...                                                    incarnation_index=0, rejoined=False)]))
        ['learner-1']
    """
    ids: set[str] = set()
    for e in history.events:
        if isinstance(e, (ev.Upload, ev.Join, ev.Leave, ev.LearnerStart)):
            ids.add(e.learner_id)
        elif isinstance(e, ev.Reject):
            if e.learner_id:
                ids.add(e.learner_id)
        elif isinstance(e, ev.Merge):
            ids.update(p.learner_id for p in e.participants)
        elif e.source and e.source != SYNCER and isinstance(e, (ev.Step, ev.LearnerStop, ev.LearnerJoin,
                                                                 ev.SyncStartEvent, ev.SyncResult, ev.Apply)):
            ids.add(e.source)
    for w in history.fault_windows():
        ids.update(t for t in w.targets if t != SYNCER)
    ids.discard("")
    return sorted(ids, key=_natural_key)


def _lanes_of(w: FaultWindow, learners: list[str]) -> list[str]:
    """The lanes a fault window takes down: a syncer target of a network fault means every learner's link."""
    if w.kind == "syncer_crash":
        return [SYNCER]
    if SYNCER in w.targets and fault_family(w.kind) == "network":
        return list(learners)
    return [t for t in w.targets if t == SYNCER or t in learners]


def write_timeline(history: History, report: dict[str, Any], path: Path) -> None:
    """Draw the run's timeline as a PNG: eval loss with fault windows (top) and per-learner activity lanes (bottom).

    The x axis is seconds after steady state (:func:`timeline_origin`). Top: eval
    loss (final eval starred), the loss floor (dashed), the baseline's final
    loss (dotted, when ``report["baseline"]`` has one), fault windows shaded red
    (process faults) or blue (network faults); an un-healed fault shades to the
    end. Bottom: one lane per learner plus the syncer: uploads (ticks), merges
    the learner took part in (dots), rejections (red x), (re)starts (triangles),
    the syncer's merges, and hatched bars where a fault took a lane down.
    Works on an empty history.

    Example:
        write_timeline(History.read(run_dir), report, run_dir / "timeline.png")
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    t0 = timeline_origin(history)
    windows = history.fault_windows()
    learners = learner_lanes(history)
    evals = history.of(ev.Eval)
    merges = history.of(ev.Merge)

    stamps = [r.ts for r in history.records] + [e.ts for e in history.events]
    x_lo = min([0.0] + [t - t0 for t in stamps])
    x_hi = max([x_lo + 1.0] + [t - t0 for t in stamps] + [(w.end or w.start) - t0 for w in windows])
    pad = 0.01 * (x_hi - x_lo)

    fig = Figure(figsize=(12, 7), dpi=100)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    name = str(report.get("scenario") or (history.plan().scenario if history.plan() else "chaos run"))
    status = str(report.get("status") or "unknown")
    fig.suptitle(f"{name}: {status_word(status)}", color=STATUS_COLOURS.get(status, "black"), fontweight="bold")

    # ---- top: eval loss, floor, baseline, fault windows
    handles: list[Any] = []
    if evals:
        xs = [e.ts - t0 for e in evals]
        handles += top.plot(xs, [e.loss for e in evals], "-o", color="tab:green", markersize=3, label="eval loss")
        finals = [e for e in evals if e.final] or [evals[-1]]
        last = finals[-1]
        handles += top.plot([last.ts - t0], [last.loss], "*", color="black", markersize=12,
                            label=f"final eval {last.loss:.3f}" if last.final else f"last eval {last.loss:.3f}")
    else:
        top.text(0.5, 0.5, "no eval events", transform=top.transAxes, ha="center", va="center", color="grey")
    floor = evals[-1].loss_floor if evals else (report.get("metrics") or {}).get("loss_floor")
    if _finite(floor):
        handles.append(top.axhline(floor, linestyle="--", color="grey", linewidth=1, label=f"loss floor {floor:.3f}"))
    baseline = report.get("baseline")
    base = baseline.get("final_eval_loss") if isinstance(baseline, dict) else None
    if _finite(base):
        handles.append(top.axhline(base, linestyle=":", color="tab:purple", linewidth=1.5,
                                   label=f"baseline final {base:.3f}"))
    families: set[str] = set()
    for i, w in enumerate(windows):
        family = fault_family(w.kind)
        families.add(family)
        a, b = w.start - t0, (w.end - t0) if w.end is not None else x_hi + pad
        colour = FAMILY_COLOURS[family]
        top.axvspan(a, b, color=colour, alpha=0.15 if w.injected else 0.06, linewidth=0)
        label = f"{w.fault_id} {w.kind}" + ("" if w.end is not None else " (not healed)")
        if not w.injected:
            label += " (inject failed)"
        top.text(a, 0.98 - 0.07 * (i % 4), " " + label, transform=top.get_xaxis_transform(), ha="left", va="top",
                 fontsize=8, color=colour, clip_on=True)
    handles += [Patch(color=FAMILY_COLOURS[f], alpha=0.3, label=f"{f} fault") for f in sorted(families)]
    if any(isinstance(r, Phase) and r.name == "steady" for r in history.records):
        top.axvline(0.0, color="black", linewidth=0.6, alpha=0.5)
        bottom.axvline(0.0, color="black", linewidth=0.6, alpha=0.5)
    top.set_ylabel("eval loss")
    top.grid(True, alpha=0.3)
    if handles:
        top.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)

    # ---- bottom: lanes
    lanes = [SYNCER, *learners]
    y = {lane: i for i, lane in enumerate(lanes)}
    for w in windows:
        family = fault_family(w.kind)
        a, b = w.start - t0, (w.end - t0) if w.end is not None else x_hi + pad
        for lane in _lanes_of(w, learners):
            bottom.broken_barh([(a, max(b - a, 0.0))], (y[lane] - 0.4, 0.8), facecolors="lightgrey",
                               edgecolors=FAMILY_COLOURS[family], hatch="///" if family == "process" else "...",
                               linewidth=0.5, alpha=0.8, zorder=1)
    uploads = history.of(ev.Upload)
    rejects = history.of(ev.Reject)
    for lane in learners:
        ups = [u.ts - t0 for u in uploads if u.learner_id == lane]
        if ups:
            bottom.plot(ups, [y[lane] - 0.25] * len(ups), "|", color="tab:blue", markersize=6, zorder=3)
        merged = [m.ts - t0 for m in merges if any(p.learner_id == lane for p in m.participants)]
        if merged:
            bottom.plot(merged, [y[lane]] * len(merged), "o", color="tab:green", markersize=3, zorder=3)
        rej = [r.ts - t0 for r in rejects if r.learner_id == lane]
        if rej:
            bottom.plot(rej, [y[lane] + 0.25] * len(rej), "x", color="red", markersize=7, zorder=4)
        starts = [s.ts - t0 for s in history.of(ev.LearnerStart) if s.learner_id == lane]
        if starts:
            bottom.plot(starts, [y[lane]] * len(starts), ">", color="black", markersize=6, zorder=4)
    if merges:
        mx = [m.ts - t0 for m in merges]
        bottom.plot(mx, [y[SYNCER]] * len(mx), "|", color="tab:green", markersize=8, zorder=3)
    syncer_starts = [s.ts - t0 for s in history.of(ev.SyncerStart)]
    if syncer_starts:
        bottom.plot(syncer_starts, [y[SYNCER]] * len(syncer_starts), ">", color="black", markersize=6, zorder=4)
    unattributed = [r.ts - t0 for r in rejects if r.learner_id not in y or r.learner_id == SYNCER]
    if unattributed:
        bottom.plot(unattributed, [y[SYNCER] + 0.25] * len(unattributed), "x", color="red", markersize=7, zorder=4)
    bottom.set_yticks(range(len(lanes)), lanes)
    bottom.set_ylim(len(lanes) - 0.5, -0.5)  # syncer on top
    bottom.set_xlabel("seconds after steady state" if history.phase("steady") else "seconds after start")
    bottom.grid(True, axis="x", alpha=0.3)
    lane_handles = [
        Line2D([], [], marker="|", linestyle="", color="tab:blue", label="upload"),
        Line2D([], [], marker="o", linestyle="", color="tab:green", markersize=4, label="in merge"),
        Line2D([], [], marker="|", linestyle="", color="tab:green", markersize=8, label="merge (syncer)"),
        Line2D([], [], marker="x", linestyle="", color="red", label="reject"),
        Line2D([], [], marker=">", linestyle="", color="black", label="(re)start"),
        Patch(facecolor="lightgrey", edgecolor="grey", hatch="///", label="down (fault)"),
    ]
    bottom.legend(handles=lane_handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    top.set_xlim(x_lo - pad, x_hi + pad)

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
