"""System-under-test presets (trainer.presets) and the CLI's --preset / DILOCO_PRESET."""

from __future__ import annotations

import math

import pytest

from chaos import cli
from chaos.errors import ScenarioError
from chaos.scenario import builtin_scenarios
from trainer import presets
from trainer.model import MODEL_SIZES, param_shapes, sized


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
@pytest.mark.parametrize("preset", sorted(presets.PRESETS))
def test_every_built_in_takes_every_preset(name: str, preset: str) -> None:
    s = cli._load(name, preset=preset)
    want = presets.PRESETS[preset].cluster
    if preset == "tiny":
        assert s == cli._load(name)  # the scenario as written
    else:
        assert s.cluster.model.size == want["model"]["size"] and s.cluster.data.source == "text"
        assert s.cluster.token_budget == want["token_budget"] and s.cluster.learner.step_delay_s == 0


def test_set_wins_over_the_preset_and_the_environment_chooses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    s = cli._load("kill-and-rejoin", sets=["cluster.token_budget=123456"], preset="small")
    assert s.cluster.token_budget == 123456 and s.cluster.model.size == "small"
    monkeypatch.setenv("DILOCO_PRESET", "wide")
    args = cli.build_parser().parse_args(["run", "kill-and-rejoin"])
    assert args.preset == "wide"


def test_an_unknown_preset_is_refused_with_the_list() -> None:
    with pytest.raises(ScenarioError, match="unknown preset 'huge': choose one of tiny, small, wide"):
        cli._load("kill-and-rejoin", preset="huge")


def test_the_presets_state_sizes() -> None:
    """wide holds ≥ 50 MB of parameters plus outer momentum (fp32, 8 bytes a parameter); small is the 3.3M model."""

    def params(size: str) -> int:
        return sum(math.prod(shape) for shape in param_shapes(sized(size, 256)).values())

    assert params("wide") * 8 >= 50e6 > params("small") * 8
    assert params("small") == 3_319_296 and MODEL_SIZES["tiny"].vocab_size == 64
