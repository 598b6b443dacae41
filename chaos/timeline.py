"""The timeline of a chaos run, ``timeline.png``: eval loss with fault windows, and per-learner activity lanes.

Pure rendering from the run's :class:`~chaos.history.History` and its report; matplotlib is imported only by
:func:`write_timeline` (with the non-interactive Agg backend).

Example:
    write_timeline(History.read(run_dir), report, run_dir / "timeline.png")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.formatting import STATUS_COLOURS, finite, natural_key, status_word
from chaos.history import FaultWindow, History, Phase
from chaos.run_report import RunReport
from faults.base import SYNCER
from faults.kinds import KINDS, syncer_only
from trainer import events as ev

FAMILY_COLOURS = {"process": "tab:red", "network": "tab:blue"}


def fault_family(kind: str) -> str:
    """What a fault acts on (:data:`faults.kinds.KINDS`): ``"process"`` or ``"network"`` (also for a kind this
    version does not know, e.g. in an older run's history).

    Example:
        >>> fault_family("kill"), fault_family("partition"), fault_family("disconnect")
        ('process', 'network', 'network')
    """
    k = KINDS.get(kind)
    return k.family if k else "network"


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
        elif (
            e.source
            and e.source != SYNCER
            and isinstance(
                e, (ev.Step, ev.LearnerStop, ev.LearnerJoin, ev.SyncStartEvent, ev.SyncResult, ev.Apply)
            )
        ):
            ids.add(e.source)
    for w in history.fault_windows():
        ids.update(t for t in w.targets if t != SYNCER)
    ids.discard("")
    return sorted(ids, key=natural_key)


def _lanes_of(w: FaultWindow, learners: list[str]) -> list[str]:
    """The lanes a fault window takes down: a syncer target of a network fault means every learner's link."""
    if syncer_only(w.kind):
        return [SYNCER]
    if SYNCER in w.targets and fault_family(w.kind) == "network":
        return list(learners)
    return [t for t in w.targets if t == SYNCER or t in learners]


def write_timeline(history: History, report: RunReport | None, path: Path) -> None:
    """Draw the run's timeline as a PNG: eval loss with fault windows (top) and per-learner activity lanes (bottom).

    The x axis is seconds after steady state (:func:`timeline_origin`). Top: eval
    loss (final eval starred), the loss floor (dashed), the baseline's final
    loss (dotted, when the report has a baseline), fault windows shaded red
    (process faults) or blue (network faults); an un-healed fault shades to the
    end. Bottom: one lane per learner plus the syncer: uploads (ticks), merges
    the learner took part in (dots), rejections (red x), (re)starts (triangles),
    the syncer's merges, and hatched bars where a fault took a lane down.
    Works on an empty history, and without a report (None: the title is the plan's scenario).

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
    plan = history.plan()
    name = (report.scenario if report else "") or (plan.scenario if plan else "chaos run")
    status = report.status if report else "unknown"
    fig.suptitle(f"{name}: {status_word(status)}", color=STATUS_COLOURS.get(status, "black"), fontweight="bold")

    # ---- top: eval loss, floor, baseline, fault windows
    handles: list[Any] = []
    if evals:
        xs = [e.ts - t0 for e in evals]
        handles += top.plot(xs, [e.loss for e in evals], "-o", color="tab:green", markersize=3, label="eval loss")
        finals = [e for e in evals if e.final] or [evals[-1]]
        last = finals[-1]
        handles += top.plot(
            [last.ts - t0],
            [last.loss],
            "*",
            color="black",
            markersize=12,
            label=f"final eval {last.loss:.3f}" if last.final else f"last eval {last.loss:.3f}",
        )
    else:
        top.text(0.5, 0.5, "no eval events", transform=top.transAxes, ha="center", va="center", color="grey")
    floor = evals[-1].loss_floor if evals else report.metrics.loss_floor if report else None
    if finite(floor):
        handles.append(
            top.axhline(floor, linestyle="--", color="grey", linewidth=1, label=f"loss floor {floor:.3f}")
        )
    base = report.baseline.final_eval_loss if report and report.baseline else None
    if finite(base):
        handles.append(
            top.axhline(base, linestyle=":", color="tab:purple", linewidth=1.5, label=f"baseline final {base:.3f}")
        )
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
        top.text(
            a,
            0.98 - 0.07 * (i % 4),
            " " + label,
            transform=top.get_xaxis_transform(),
            ha="left",
            va="top",
            fontsize=8,
            color=colour,
            clip_on=True,
        )
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
            bottom.broken_barh(
                [(a, max(b - a, 0.0))],
                (y[lane] - 0.4, 0.8),
                facecolors="lightgrey",
                edgecolors=FAMILY_COLOURS[family],
                hatch="///" if family == "process" else "...",
                linewidth=0.5,
                alpha=0.8,
                zorder=1,
            )
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
