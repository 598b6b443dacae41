"""``diloco-chaos simulate --scale``: flags, plan files, comparison, outputs and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.scale import load_scale_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plans" / "four-sites-12b.yaml"


def test_flags_make_a_plan_and_print_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """Flags alone run one plan and print goodput, the longest stall and the time to budget."""
    code = main(
        [
            "simulate",
            "--scale",
            "--chips",
            "150k",
            "--mode",
            "data-parallel",
            "--no-elastic",
            "--duration",
            "1d",
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "150k chips" in out and "data-parallel, no elasticity: goodput" in out
    assert "longest global stall" in out and "time to budget not reached" in out


def test_compare_prints_every_approach_side_by_side(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--compare runs both data-parallel variants, sync DiLoCo and Decoupled DiLoCo on the same plan; --json keeps them."""
    out_json = tmp_path / "r.json"
    code = main(
        [
            "simulate",
            "--scale",
            "--chips",
            "300k",
            "--learners",
            "4",
            "--duration",
            "6h",
            "--budget",
            "10T",
            "--compare",
            "--json",
            str(out_json),
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    for label in ("data-parallel, no elasticity", "data-parallel, elastic", "sync-diloco M=4", "decoupled M=4"):
        assert f"| {label} |" in out
    doc = json.loads(out_json.read_text())
    goodput = {(r["mode"], r["elastic"]): r["goodput"] for r in doc["results"]}
    assert doc["plan"]["cluster"]["chips"] == 300_000
    assert goodput[("data-parallel", False)] < goodput[("data-parallel", True)] < goodput[("decoupled", True)]


def test_plan_file_with_overrides(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A plan file runs, and flags and --set override its fields."""
    out_json = tmp_path / "r.json"
    code = main(
        [
            "simulate",
            "--scale",
            str(EXAMPLE),
            "--duration",
            "2h",
            "--set",
            "algorithm.num_learners=3",
            "--json",
            str(out_json),
            "--quiet",
        ]
    )
    assert code == 0
    doc = json.loads(out_json.read_text())
    assert doc["plan"]["duration"] == 7200 and doc["plan"]["algorithm"]["num_learners"] == 3
    assert doc["results"][0]["learners"] == 3 and doc["results"][0]["mode"] == "decoupled"
    assert "four-sites-12b" in capsys.readouterr().out


def test_the_example_plan_is_valid_and_its_comparison_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped example plan validates, and --compare accepts its scheduled failure for data-parallel too."""
    cfg = load_scale_config(EXAMPLE)
    assert cfg.cluster.sites == 4 and cfg.failures.schedule[0].learner == 2
    assert main(["simulate", "--scale", str(EXAMPLE), "--duration", "1h", "--compare", "--quiet"]) == 0
    assert "| decoupled M=4 |" in capsys.readouterr().out


def test_timeline_picture_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--timeline draws the run's lanes to a PNG."""
    png = tmp_path / "t.png"
    code = main(
        [
            "simulate",
            "--scale",
            "--chips",
            "64",
            "--learners",
            "4",
            "--mtbi",
            "1h",
            "--duration",
            "10min",
            "--step",
            "1",
            "--timeline",
            str(png),
            "--quiet",
        ]
    )
    assert code == 0 and png.stat().st_size > 5_000
    assert f"timeline: {png}" in capsys.readouterr().out


def test_progress_is_shown_unless_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --quiet the progress display reports each mode finishing (stderr; a bar on a terminal)."""
    assert main(["simulate", "--scale", "--chips", "1k", "--duration", "1h"]) == 0
    assert "decoupled M=8: done 100%" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--chips", "lots"], "cluster.chips: 'lots' is not a number"),
        (["--mtbi", "soon"], "failures.mtbi_per_chip"),
        (["--mode", "data-parallel", "--learners", "4"], "data-parallel is one job over all chips"),
        (["--set", "cluster.cores=3"], "cluster.cores: Extra inputs are not permitted"),
        (["--compare", "--timeline", "x.png"], "--timeline draws one run"),
        (["no-such-plan.yaml"], "no-such-plan.yaml: cannot read the plan"),
    ],
)
def test_bad_input_is_named_and_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every bad flag, field or file exits 2 with a message naming what is wrong."""
    assert main(["simulate", "--scale", *argv, "--quiet"]) == 2
    assert message in capsys.readouterr().err


def test_simulate_without_scenario_or_scale_says_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    """simulate with no scenario and no --scale is refused, naming both ways to call it."""
    assert main(["simulate"]) == 2
    err = capsys.readouterr().err
    assert "SCENARIO" in err and "--scale" in err


def test_sweep_runs_the_plan_per_value_and_plots_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--sweep FIELD=V1,V2 runs every approach per value; goodput falls with chips; --plot and --json keep it."""
    png, out_json = tmp_path / "s.png", tmp_path / "s.json"
    code = main(
        [
            "simulate",
            "--scale",
            "--sweep",
            "cluster.chips=150k,2.4M",
            "--compare",
            "--duration",
            "6h",
            "--plot",
            str(png),
            "--json",
            str(out_json),
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and png.stat().st_size > 5_000
    assert "| approach | cluster.chips=150k | cluster.chips=2.4M |" in out
    doc = json.loads(out_json.read_text())
    assert doc["sweep"] == {"field": "cluster.chips", "values": ["150k", "2.4M"]}
    by = {(r["chips"], r["mode"], r["elastic"]): r["goodput"] for r in doc["results"]}
    assert len(doc["results"]) == 8
    assert by[(2.4e6, "data-parallel", False)] < by[(150e3, "data-parallel", False)]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sweep", "cluster.chips"], "expected FIELD=V1,V2"),
        (["--plot", "p.png"], "--plot draws goodput against a swept field"),
        (["--sweep", "cluster.chips=1k,2k", "--timeline", "t.png"], "leave out --sweep"),
        (["--sweep", "cluster.chips=1k,lots"], "cluster.chips: 'lots' is not a number"),
    ],
)
def test_bad_sweeps_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed sweep, a plot without one, or a bad swept value exits 2 naming the problem."""
    assert main(["simulate", "--scale", "--duration", "1h", *argv, "--quiet"]) == 2
    assert message in capsys.readouterr().err


def test_scale_flags_without_scale_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Scale-simulator flags on a deterministic-mode simulate are refused rather than silently ignored."""
    assert main(["simulate", "kill-and-rejoin", "--chips", "2.4M", "--compare"]) == 2
    assert "--chips, --compare belong to the scale simulator: add --scale" in capsys.readouterr().err


def test_a_results_file_replays_its_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The --json results file records the whole plan and seed: simulating it again gives the same figures."""
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    assert (
        main(
            [
                "simulate",
                "--scale",
                "--chips",
                "20k",
                "--seed",
                "7",
                "--duration",
                "3h",
                "--mtbi",
                "10d",
                "--json",
                str(first),
                "--quiet",
            ]
        )
        == 0
    )
    assert main(["simulate", "--scale", str(first), "--json", str(again), "--quiet"]) == 0
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert a["plan"] == b["plan"] and a["plan"]["seed"] == 7
    assert a["results"] == b["results"] and a["results"][0]["failures"] > 0


def test_compare_with_heterogeneous_learners_runs_data_parallel_at_the_slowest_pace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--compare accepts per-learner step times: the data-parallel variants step at the slowest learner's time."""
    out_json = tmp_path / "h.json"
    code = main(
        [
            "simulate",
            "--scale",
            "--learners",
            "4",
            "--duration",
            "1h",
            "--compare",
            "--set",
            "workload.step_s_overrides.2=1.5",
            "--json",
            str(out_json),
            "--quiet",
        ]
    )
    assert code == 0
    details = {(r["mode"], r["elastic"]): r["details"] for r in json.loads(out_json.read_text())["results"]}
    assert details[("data-parallel", True)]["step_wall_s"] == 1.5
