"""Chaos-suite fixtures: one real Toxiproxy server and one baseline cache for the whole session."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.controller import RunOptions, RunResult, run_scenario
from chaos.scenario import Scenario, load_scenario, parse_scenario, resolve
from faults.toxiproxy import ToxiproxyServer
from trainer.config import merge_trees


@pytest.fixture(scope="session")
def chaos_toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToxiproxyServer]:
    with ToxiproxyServer(log_path=tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log") as server:
        yield server


@pytest.fixture(scope="session")
def baseline_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("baselines")


def scenario_with(name: str, **overrides: Any) -> Scenario:
    """A built-in scenario with some fields replaced (nested dicts are merged)."""
    import yaml

    path = resolve(name)
    if not overrides:
        return load_scenario(path)
    return parse_scenario(merge_trees(yaml.safe_load(path.read_text()), overrides), f"{path} (test overrides)")


@pytest.fixture
def run_chaos(chaos_toxiproxy: ToxiproxyServer, baseline_cache: Path,
              tmp_path: Path) -> Callable[..., RunResult]:
    """Run a scenario on local processes through the session's Toxiproxy; progress goes to the test log."""

    def run(scenario: Scenario, baseline: bool = True) -> RunResult:
        opts = RunOptions(tmp_path / scenario.name, toxiproxy_url=chaos_toxiproxy.url, baseline=baseline,
                          baseline_cache=baseline_cache, progress=lambda m: print(m, flush=True))
        return run_scenario(scenario, opts)

    return run
