"""chaos.baselines: a parity band from fault-free runs made elsewhere (``export k8s --fault-free K``, then
``report RUN --baseline DIR ...``), checked to be the band's runs, in order; and the same band the controller
builds from the runs it makes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chaos.baselines import from_run_dirs
from chaos.cli import main
from chaos.errors import ChaosError
from chaos.run_report import Baseline
from chaos.scenario import scenario_with
from chaos.sim import SimOptions, simulate
from trainer.metrics import summarize_run

NO_BASELINE = SimOptions(baseline=False)
# kill-and-rejoin at a quarter of its budget: four simulated runs in a couple of seconds
S = scenario_with("kill-and-rejoin", cluster={"token_budget": 600_000})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """S's simulated run, without its baseline, and its band's three fault-free runs."""
    root = tmp_path_factory.mktemp("band")
    simulate(S, NO_BASELINE).write(root / "run")
    (root / "run" / "baseline.json").unlink(missing_ok=True)
    dirs = []
    for k in range(S.checks.parity.baseline_seeds):
        simulate(S.fault_free(k), NO_BASELINE).write(root / f"b{k}")
        dirs.append(root / f"b{k}")
    return root / "run", dirs


def test_the_band_is_each_seeds_fault_free_run_in_order(runs: tuple[Path, list[Path]]) -> None:
    _, dirs = runs
    b = from_run_dirs(S, dirs)
    assert b.band is not None and b.band.seeds == [0, 1, 2]
    assert b.band.losses == [summarize_run(d).final_eval_loss for d in dirs]
    assert len(set(b.band.losses)) == 3  # three seeds, three tasks: not one run read thrice
    assert [r.seed for r in b.runs] == [1, 2] and b.run_dir == str(dirs[0])


def test_report_judges_parity_against_the_runs_given(runs: tuple[Path, list[Path]], tmp_path: Path) -> None:
    run, dirs = runs
    mine = tmp_path / "run"
    shutil.copytree(run, mine)
    out = tmp_path / "out.json"
    main(["report", str(mine), *[a for d in dirs for a in ("--baseline", str(d))], "--json", str(out)])
    parity = next(v for v in json.loads(out.read_text())["verdicts"] if v["name"] == "parity")
    assert parity["status"] != "indeterminate", parity  # without a baseline it is (the negative control below)
    assert Baseline.read(mine / "baseline.json").band is not None
    bare = tmp_path / "bare"
    shutil.copytree(run, bare)
    main(["report", str(bare), "--json", str(out)])
    parity = next(v for v in json.loads(out.read_text())["verdicts"] if v["name"] == "parity")
    assert parity["status"] == "indeterminate", parity


@pytest.mark.parametrize(
    "given, says",
    [
        ("swapped", "not kill-and-rejoin's fault-free run 0 (its cluster at seed 0, no faults)"),
        ("too few", "2 baseline run(s) given; the scenario's parity band has 3"),
        ("the chaos run", "not kill-and-rejoin's fault-free run 0"),
    ],
)
def test_runs_that_are_not_the_band_are_refused_by_name(
    runs: tuple[Path, list[Path]], given: str, says: str
) -> None:
    run, dirs = runs
    wrong = {"swapped": [dirs[1], dirs[0], dirs[2]], "too few": dirs[:2], "the chaos run": [run, *dirs[1:]]}[given]
    with pytest.raises(ChaosError, match=None) as err:
        from_run_dirs(S, wrong)
    assert says in str(err.value), err.value


def test_export_writes_the_bands_runs_and_refuses_one_it_does_not_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = scenario_with("kill-and-rejoin")
    assert main(["export", "k8s", "kill-and-rejoin", "--fault-free", "2", "--out", str(tmp_path / "b2")]) == 0
    written = json.loads((tmp_path / "b2" / "scenario.json").read_text())
    assert (
        written["cluster"]["seed"] == 2
        and written["schedule"] == []
        and written["name"] == "kill-and-rejoin-baseline-2"
    )
    assert written["cluster"] == json.loads(s.fault_free(2).cluster.model_dump_json())
    assert main(["export", "k8s", "kill-and-rejoin", "--fault-free", "3", "--out", str(tmp_path / "b3")]) == 2
    assert "--fault-free 3: kill-and-rejoin's parity band has runs 0 to 2" in capsys.readouterr().err
    assert not (tmp_path / "b3").exists()
