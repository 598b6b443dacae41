"""chaos.report and chaos.timeline: the Markdown report and the timeline PNG, from a synthetic history and report."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from chaos import report as rep
from chaos import timeline as tl
from chaos.history import FaultOp, History, Phase, PlanRecord
from chaos.run_report import RunReport
from trainer import events as ev

T0 = 1_764_451_200.0  # the steady phase
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _merge(ts: float, n: int, who: list[str]) -> ev.Merge:
    parts = [
        ev.ParticipantInfo(learner_id=lid, incarnation=f"{lid}-a", weight=1.0, c_steps=10, c_tokens=640)
        for lid in who
    ]
    return ev.Merge(
        ts=ts,
        source="syncer",
        fragment=n % 2,
        version=n,
        base_version=n - 1,
        participants=parts,
        rule="rda",
        wait_s=0.1,
        quorum_wait_s=0.0,
        outer_grad_norm=0.5,
        merges_total=n,
        tokens_total=640 * len(who) * n,
    )


def _upload(ts: float, lid: str) -> ev.Upload:
    return ev.Upload(
        ts=ts,
        source="syncer",
        learner_id=lid,
        learner_incarnation=f"{lid}-a",
        fragment=0,
        base_version=0,
        bytes=1024,
        seconds=0.01,
        c_steps=10,
        c_tokens=640,
        duplicate=False,
    )


def _history() -> History:
    records: list[Any] = [
        Phase(ts=T0 - 8.0, name="bring_up"),
        PlanRecord(ts=T0 - 7.0, scenario="kill-one-learner", seed=0, faults=[]),
        Phase(ts=T0, name="steady"),
        FaultOp(
            ts=T0 + 5.0,
            fault_id="f0",
            fault_kind="kill",
            action="inject",
            outcome="invoke",
            targets=["learner-1"],
            params={"restart": True},
        ),
        FaultOp(
            ts=T0 + 5.1,
            fault_id="f0",
            fault_kind="kill",
            action="inject",
            outcome="ok",
            targets=["learner-1"],
            params={"restart": True},
            evidence={"killed": ["learner-1"]},
        ),
        FaultOp(
            ts=T0 + 15.2,
            fault_id="f0",
            fault_kind="kill",
            action="heal",
            outcome="ok",
            targets=["learner-1"],
            params={"restart": True},
        ),
        # a network fault on the syncer's side that never healed (shades to the end)
        FaultOp(
            ts=T0 + 18.0,
            fault_id="f1",
            fault_kind="partition",
            action="inject",
            outcome="ok",
            targets=["learner-0"],
            params={"direction": "both"},
        ),
        Phase(ts=T0 + 25.0, name="finished"),
    ]
    events: list[Any] = [
        ev.SyncerStart(
            ts=T0 - 6.0,
            source="syncer",
            syncer_incarnation="s-a",
            address="127.0.0.1:1",
            config_hash="abc123",
            versions=[0, 0],
            restored_from_merges=-1,
            pid=1,
        ),
        *(
            ev.LearnerStart(
                ts=T0 - 5.0,
                source=lid,
                learner_id=lid,
                learner_incarnation=f"{lid}-a",
                pid=2,
                syncer="127.0.0.1:1",
                config_hash="abc123",
            )
            for lid in ("learner-0", "learner-1")
        ),
        ev.LearnerStart(
            ts=T0 + 16.0,
            source="learner-1",
            learner_id="learner-1",
            learner_incarnation="learner-1-b",
            pid=3,
            syncer="127.0.0.1:1",
            config_hash="abc123",
        ),
    ]
    for k in range(12):
        t = T0 + 2.0 * k
        who = ["learner-0"] if 5 <= 2 * k <= 16 else ["learner-0", "learner-1"]
        events += [_upload(t - 0.2, lid) for lid in who]
        events.append(_merge(t, k + 1, who))
        events.append(
            ev.Step(
                ts=t - 0.5,
                source="learner-0",
                step=10 * k,
                loss=3.0 - 0.02 * k,
                tokens=640 * k,
                step_time_s=0.01,
                blocked_s=0.0,
            )
        )
    events.append(
        ev.Reject(
            ts=T0 + 17.0, source="syncer", call="Upload", reason="non_finite", detail="nan", learner_id="learner-1"
        )
    )
    for k in range(4):
        events.append(
            ev.Eval(
                ts=T0 + 6.0 * k + 1.0,
                source="syncer",
                merges_total=3 * k,
                versions=[k, k],
                loss=3.2 - 0.15 * k,
                loss_floor=2.39,
                tokens_total=1000 * k,
                final=k == 3,
            )
        )
    events.append(ev.Finished(ts=T0 + 24.0, source="syncer", tokens_total=4000, merges_total=12, versions=[6, 6]))
    return History(records=records, events=sorted(events, key=lambda e: e.ts))


TREE: dict[str, Any] = {
    "scenario": "kill-one-learner",
    "description": "SIGKILL one learner mid-run, restart it after 10 s.",
    "status": "pass",
    "exit_code": 0,
    "run_dir": "runs/chaos/kill-one-learner",
    "seed": 0,
    "config_hash": "abc123",
    "started_at": T0 - 10.0,
    "wall_s": 71.2,
    "verdicts": [
        {"name": "liveness", "status": "pass", "summary": "merges kept coming; longest gap 4.0 s", "evidence": {}},
        {
            "name": "parity",
            "status": "pass",
            "summary": "final loss within 15% of baseline",
            "evidence": {"ratio": 1.01},
        },
    ],
    "plan": [
        {
            "fault_id": "f0",
            "kind": "kill",
            "targets": ["learner-1"],
            "at": 5.0,
            "at_merge": None,
            "duration": 10.0,
            "params": {"restart": True},
        },
        {
            "fault_id": "f3",
            "kind": "pause",
            "targets": ["learner-2"],
            "at": 60.0,
            "at_merge": None,
            "duration": 5.0,
            "params": {},
        },
    ],
    "faults": [
        {
            "fault_id": "f0",
            "kind": "kill",
            "targets": ["learner-1"],
            "start_s": 5.1,
            "end_s": 15.2,
            "injected": True,
            "healed": True,
        }
    ],
    "not_run": ["f3"],
    "baseline": {"final_eval_loss": 2.71, "run_dir": "runs/baseline", "cached": True},
    "metrics": {
        "final_eval_loss": 2.74,
        "loss_floor": 2.39,
        "merges": 180,
        "tokens_total": 400000,
        "trained_tokens": 410000,
        "trained_tokens_merged": 381300,
        "contribution_tokens_uploaded": 1640000,
        "contribution_tokens_merged": 1525200,
        "uploads_merged": 0.93,
        "rejections": {"non_finite": 3},
        "wall_s": 70.0,
    },
    "teardown": {"proxies_left": [], "processes_left": [], "problems": []},
}
REPORT = RunReport.model_validate(TREE)


def _report(tree: dict[str, Any]) -> RunReport:
    return RunReport.model_validate(tree)


# A run that tells nothing but who it was (what a report says when everything else is empty).
BARE = {
    "scenario": "",
    "status": "pass",
    "exit_code": 0,
    "run_dir": "",
    "seed": 0,
    "config_hash": "",
    "started_at": float("nan"),
    "wall_s": float("nan"),
}


def _failing() -> RunReport:
    r = copy.deepcopy(TREE)
    r["status"] = "fail"
    r["exit_code"] = 1
    r["verdicts"].append(
        {
            "name": "reintegration",
            "status": "fail",
            "summary": "learner-1 never uploaded after its restart",
            "evidence": {"learner": "learner-1", "healed_at_s": 15.2, "first_upload_after_s": None},
        }
    )
    return _report(r)


# ---- Markdown ---------------------------------------------------------------
def test_markdown_has_the_essentials() -> None:
    md = rep.render_markdown(REPORT)
    assert md.startswith("# Chaos run: kill-one-learner")
    assert "## Result: PASS" in md
    assert REPORT.description in md
    for v in REPORT.verdicts:
        assert f"| {v.name} | {v.status.upper()} |" in md
    assert "| f0 | kill | learner-1 | 5.1 | 15.2 | restart=true |" in md
    assert "`f3`: pause learner-2 at 60.0 s" in md  # planned, not run
    assert f"diloco-chaos replay {REPORT.run_dir}\n" in md  # a local run: the default backend
    assert "(timeline.png)" in md and "(history.jsonl)" in md
    assert "2.740" in md and "2.710 (delta +0.030, +1.1%), cached" in md
    assert "non_finite: 3" in md and "180" in md
    # every token figure named by what it counts: trained tokens and contribution tokens, never one for both
    assert "| trained tokens the syncer counted (the budget's count) | 400,000 |" in md
    assert "| trained tokens merged (compute goodput) | 381,300 (93.0% of trained) |" in md
    assert "| contribution tokens merged of uploaded | 1,525,200 of 1,640,000 (93.0%) |" in md
    assert "Clean:" in md
    assert "```json" not in md  # nothing failed: no evidence blocks


def test_markdown_marks_a_simulated_run_and_replays_it_where_it_ran() -> None:
    """Deterministic mode's clock is virtual: no date, "simulated" said first; each backend replays on itself."""
    sim = REPORT.model_copy(update={"backend": "sim", "started_at": 1_700_000_000.0})
    md = rep.render_markdown(sim)
    assert "**simulated** in deterministic mode" in md and "virtual time" in md
    assert "2023-" not in md and "UTC" not in md
    assert f"diloco-chaos replay {REPORT.run_dir} --backend sim" in md
    docker = rep.render_markdown(REPORT.model_copy(update={"backend": "docker"}))
    assert "simulated" not in docker and "backend `docker`" in docker and "UTC" in docker
    assert f"diloco-chaos replay {REPORT.run_dir} --backend docker" in docker


def test_markdown_shows_the_parity_band_and_its_seeds() -> None:
    r = copy.deepcopy(TREE)
    assert "| fault-free band (parity) | one baseline |" in rep.render_markdown(_report(r))
    r["baseline"]["band"] = {"seeds": [0, 1, 2], "excess": [0.32, 0.30, 0.35]}
    r["verdicts"][1]["evidence"] = {"band": {"low": 2.69, "high": 2.74}}
    assert (
        "| fault-free band (parity) | 2.690 – 2.740 (this run's floor + the fault-free excess at cluster seeds "
        "0, 1, 2) |"
    ) in rep.render_markdown(_report(r))


def test_failing_report_says_fail_and_shows_evidence() -> None:
    md = rep.render_markdown(_failing())
    assert "## Result: FAIL" in md and "PASS" not in md.split("\n## Checks")[0]
    assert "| reintegration | FAIL | learner-1 never uploaded after its restart |" in md
    why = md.split("### Why `reintegration` is FAIL", 1)[1]
    block = why.split("```json", 1)[1].split("```", 1)[0]
    assert '"first_upload_after_s": null' in block and '"healed_at_s": 15.2' in block
    assert "exit code 1" in md


def test_error_report_and_missing_keys() -> None:
    md = rep.render_markdown(
        _report({**BARE, "scenario": "syncer-crash", "status": "error", "error": "toxiproxy not reachable"})
    )
    assert "## Result: ERROR" in md and "toxiproxy not reachable" in md
    assert "No checks ran." in md and "No fault was injected." in md and "Teardown" in md
    assert "diloco-chaos replay RUN_DIR" in md  # no run directory recorded: the reader fills it in
    assert rep.render_markdown(_report(BARE)).startswith("# Chaos run:")


def test_markdown_escapes_cells_and_reports_dirty_teardown() -> None:
    r = copy.deepcopy(TREE)
    r["verdicts"][0]["summary"] = "a | b\nc"
    r["teardown"] = {
        "proxies_left": ["learner-0-link"],
        "processes_left": ["learner-1"],
        "problems": ["stopping learner-1: no such container"],
    }
    r["baseline"] = None
    r["metrics"]["contribution_tokens_uploaded"] = 0
    r["faults"][0].update(end_s=None, healed=False)
    md = rep.render_markdown(_report(r))
    assert "a \\| b c" in md
    assert "**Not clean:**" in md and "learner-0-link" in md and "- processes left: learner-1" in md
    assert "- problems: stopping learner-1: no such container" in md
    assert "no baseline" in md and "| contribution tokens merged of uploaded | 1,525,200 of 0 |" in md
    assert "never healed" in md


def test_write_markdown(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "report.md"
    rep.write_markdown(_failing(), out)
    assert out.read_text(encoding="utf-8") == rep.render_markdown(_failing())


# ---- timeline -----------------------------------------------------------------
def test_times_are_relative_to_steady() -> None:
    h = _history()
    assert tl.timeline_origin(h) == T0
    assert tl.relative_times(h, [T0 - 8.0, T0 + 5.1]) == pytest.approx([-8.0, 5.1])
    no_steady = History(
        records=[r for r in h.records if not (isinstance(r, Phase) and r.name == "steady")], events=h.events
    )
    assert tl.timeline_origin(no_steady) == h.start == T0 - 8.0
    assert tl.timeline_origin(History(records=[], events=[])) == 0.0


def test_lanes_and_families() -> None:
    assert tl.learner_lanes(_history()) == ["learner-0", "learner-1"]
    assert tl.fault_family("kill") == "process" and tl.fault_family("latency") == "network"
    assert tl.fault_family("cpu_limit") == "process"


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 5_000


def test_timeline_png(tmp_path: Path) -> None:
    out = tmp_path / "timeline.png"
    tl.write_timeline(_history(), _failing(), out)
    _assert_png(out)
    # 12 x 7 in at 100 dpi
    import struct

    width, height = struct.unpack(">II", out.read_bytes()[16:24])
    assert (width, height) == (1200, 700)


def test_timeline_png_empty_history(tmp_path: Path) -> None:
    out = tmp_path / "empty.png"
    tl.write_timeline(History(records=[], events=[]), None, out)
    _assert_png(out)
    out2 = tmp_path / "error.png"
    tl.write_timeline(
        History(records=[Phase(ts=T0, name="bring_up")], events=[]),
        _report({**BARE, "scenario": "x", "status": "error", "baseline": None}),
        out2,
    )
    _assert_png(out2)


def test_timeline_syncer_faults_and_no_steady(tmp_path: Path) -> None:
    h = _history()
    h.records.append(
        FaultOp(
            ts=T0 + 20.0,
            fault_id="f2",
            fault_kind="syncer_crash",
            action="inject",
            outcome="fail",
            targets=["syncer"],
            error="no such process",
        )
    )
    h.records.append(
        FaultOp(
            ts=T0 + 21.0,
            fault_id="f4",
            fault_kind="latency",
            action="inject",
            outcome="ok",
            targets=["syncer"],
            params={"ms": 100},
        )
    )
    h.records = [r for r in h.records if not (isinstance(r, Phase) and r.name == "steady")]
    out = tmp_path / "t.png"
    tl.write_timeline(h, REPORT, out)
    _assert_png(out)


def test_regime_warnings_lead_the_report():
    md = rep.render_markdown(
        _report({**BARE, "scenario": "s", "warnings": ["outside the regime: 1.2 of 3 learners"]})
    )
    assert "> **Warning:** outside the regime: 1.2 of 3 learners" in md
    assert "Warning" not in rep.render_markdown(_report({**BARE, "scenario": "s", "warnings": []}))


def test_markdown_quotes_the_parity_false_alarm_rate_or_why_there_is_none() -> None:
    r = copy.deepcopy(TREE)
    r["parity_false_alarm"] = None
    assert "| parity false-alarm rate | n/a (parity off) |" in rep.render_markdown(_report(r))
    r["parity_false_alarm"] = {
        "text": "0 of 8 fault-free runs outside the band by more than ±0.15 (95% CI 0%–32%), "
        "measured under load on this cluster",
        "measured": "2026-12-01T02:55:02+00:00",
    }
    assert (
        "| parity false-alarm rate | 0 of 8 fault-free runs outside the band by more than ±0.15 (95% CI 0%–32%), "
        "measured under load on this cluster, 2026-12-01T02:55:02+00:00 (benchmarks/calibration/parity_false_alarm.py) |"
    ) in rep.render_markdown(_report(r))
