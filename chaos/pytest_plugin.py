"""pytest plugin: write your own chaos tests against the trainer.

Installed with the package (entry point ``pytest11``), so any project that
depends on diloco-chaos gets it. It adds

markers (namespaced: a project's own ``nightly`` or ``docker`` marker is its business, never deselected here)
    ``chaos`` (whole scenarios on local processes, minutes), ``chaos_docker``
    (containers), ``chaos_nightly`` (the long tier: deselected unless
    ``--chaos-nightly``), ``chaos_simulation`` (deterministic mode), ``chaos_rotate(per_night=k)``
    (a nightly parametrized family runs k members a night, in turn: :mod:`chaos.rotation`;
    ``family="name"`` makes a module's tests that name it one family).
Hypothesis profiles (registered, never loaded for you: ``--hypothesis-profile NAME``)
    ``chaos`` (per change: 10 examples, derandomized, so every run explores the same schedules),
    ``chaos-quick`` (the inner loop: 5 examples, derandomized) and
    ``chaos-nightly`` (25 examples, random; pass ``--hypothesis-seed N`` to make a night replayable: the header
    prints it, and the rotation and long searches take it too). All: no deadline, and the health checks a
    simulated cluster trips (too slow, function-scoped fixtures, filtering) off. Hypothesis's own options and
    example database work as usual.
options
    ``--chaos-nightly`` run the nightly tier too;
    ``--chaos-no-rotation`` every member of a rotated family, not tonight's;
    ``--chaos-reports DIR`` keep every chaos run directory (reports,
    timelines, histories) under DIR instead of pytest's tmp dirs;
    ``--chaos-toxiproxy-url URL`` (or ``$DILOCO_TOXIPROXY_URL``) use a running Toxiproxy server instead of
    starting one.
fixtures
    ``chaos_toxiproxy`` (a real Toxiproxy server for the session, or the one named),
    ``chaos_cluster`` (start a syncer and learners, each learner behind its
    own Toxiproxy proxy, as local processes: the ``Cluster`` every fault in
    :mod:`faults` acts on; always torn down, proxies deleted),
    ``run_chaos`` (run a scenario on local processes, baseline cached for the
    session), ``simulate_chaos`` (run one in deterministic mode),
    ``chaos_seed``.
helpers
    :func:`chaos_settings` — the loaded profile's settings for a chaos property test (the suppressed health
    checks, no deadline); :func:`chaos_examples` — the loaded profile's example count.

Example test::

    from hypothesis import given
    from chaos.pytest_plugin import chaos_settings
    from chaos.scenario import scenario_with
    from chaos.strategies import fault_schedules, outer_step_seconds, to_scenario

    BASE = scenario_with("kill-and-rejoin", schedule=[])

    @chaos_settings()
    @given(schedule=fault_schedules(learners=3))   # by keyword: positional strategies fill the *last* arguments
    def test_liveness_for_admissible_schedules(schedule, simulate_chaos):
        r = simulate_chaos(to_scenario(BASE, schedule, outer_step_seconds(BASE, 0.03)))
        assert not r.failed("liveness", "safety")

    @pytest.mark.chaos
    def test_kill_and_rejoin(run_chaos):  # pytest --hypothesis-profile chaos
        assert run_chaos(scenario_with("kill-and-rejoin")).exit_code == 0
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, settings

from chaos.rotation import night_of, tonight

__all__ = [
    "ChaosOptions",
    "MARKERS",
    "TOXIPROXY_URL_ENV",
    "chaos_settings",
    "chaos_examples",
    "seed_number",
    "chaos_seed",
    "chaos_toxiproxy",
    "chaos_baseline_cache",
    "chaos_run_dir",
    "chaos_cluster",
    "run_chaos",
    "simulate_chaos",
]

NIGHTLY, ROTATE = "chaos_nightly", "chaos_rotate"
MARKERS = {
    "chaos": "whole chaos scenarios on local processes with the real Toxiproxy (minutes)",
    "chaos_docker": "the compose deployment in real containers (needs Docker and the images)",
    NIGHTLY: "chaos_nightly(minutes=N): the nightly tier (long scenarios, full-size parity), deselected unless "
    "--chaos-nightly; N, how long the test takes, orders the night longest first",
    "chaos_simulation": "deterministic mode: generated schedules on the virtual clock",
    ROTATE: "chaos_rotate(per_night=k, family=None): a nightly parametrized family (or a module's tests naming "
    "one family) runs k members a night, in turn by the nightly seed's date (chaos.rotation); "
    "--chaos-no-rotation runs them all",
}
TOXIPROXY_URL_ENV = "DILOCO_TOXIPROXY_URL"


class _ChaosSettings(TypedDict):
    deadline: None
    suppress_health_check: list[HealthCheck]


# Hypothesis profiles for chaos property tests; registered here, loaded only by --hypothesis-profile.
_CHAOS_SETTINGS = _ChaosSettings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
settings.register_profile("chaos", max_examples=10, derandomize=True, **_CHAOS_SETTINGS)
# The inner loop (scripts/test --quick): half the per-change examples, so that unit, property and deterministic-mode
# tests answer in under 3 minutes; per change still runs all 10 (docs/ci-tiers.md).
settings.register_profile("chaos-quick", max_examples=5, derandomize=True, **_CHAOS_SETTINGS)
settings.register_profile("chaos-nightly", max_examples=25, **_CHAOS_SETTINGS)


@dataclass
class ChaosOptions:
    seed: int = 0  # --hypothesis-seed as a number (0 without one): the rotation's night, the long searches' seed
    nightly: bool = False
    rotation: bool = True
    reports: Path | None = None
    toxiproxy_url: str | None = None


OPTIONS = ChaosOptions()  # set from the command line at configure time, read when test modules are imported
# What OPTIONS held before this session configured it: an in-process inner session (pytester's runpytest) must not
# leave its options behind for the outer session's later tests (it reset a nightly's seed and examples).
_OUTER = pytest.StashKey[ChaosOptions]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("diloco-chaos")
    g.addoption("--chaos-nightly", action="store_true", help="also run tests marked chaos_nightly")
    g.addoption(
        "--chaos-no-rotation",
        action="store_true",
        help="nightly: run every member of a family marked rotate, not tonight's slice",
    )
    g.addoption("--chaos-reports", default=None, help="keep chaos run directories under this folder")
    g.addoption(
        "--chaos-toxiproxy-url",
        default=None,
        help=f"use this running Toxiproxy server (default ${TOXIPROXY_URL_ENV}, else start one)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_OUTER] = replace(OPTIONS)
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    OPTIONS.seed = seed_number(config.getoption("hypothesis_seed", None))
    OPTIONS.nightly = bool(config.getoption("--chaos-nightly", False))
    OPTIONS.rotation = not config.getoption("--chaos-no-rotation", False)
    reports = config.getoption("--chaos-reports", None)
    OPTIONS.reports = Path(reports) if reports else None
    OPTIONS.toxiproxy_url = config.getoption("--chaos-toxiproxy-url", None) or os.environ.get(TOXIPROXY_URL_ENV)


def seed_number(seed: object) -> int:
    """``--hypothesis-seed`` as a number: digits as written, another string by its CRC-32, none as 0.

    >>> seed_number("20261203"), seed_number(None), seed_number("abc") == seed_number("abc")
    (20261203, 0, True)
    """
    if seed is None or seed == "":
        return 0
    text = str(seed)
    return int(text) if text.isdigit() else zlib.crc32(text.encode())


def pytest_unconfigure(config: pytest.Config) -> None:
    outer = config.stash.get(_OUTER, None)
    if outer is not None:
        for f in fields(ChaosOptions):
            setattr(OPTIONS, f.name, getattr(outer, f.name))


def pytest_report_header(config: pytest.Config) -> str:
    tier = "nightly" if OPTIONS.nightly else "per-change (chaos_nightly tests deselected)"
    if OPTIONS.nightly:
        tier += f", rotated families: night {night_of(OPTIONS.seed)}" if OPTIONS.rotation else ", no rotation"
    return (
        f"diloco-chaos: {tier}; Hypothesis profile {settings.get_current_profile_name()}: "
        f"{chaos_examples()} examples, seed {OPTIONS.seed}"
    )


def _nightly_order(item: pytest.Item) -> tuple[bool, float]:
    mark = item.get_closest_marker(NIGHTLY)
    return mark is None, -float(mark.kwargs.get("minutes", 0)) if mark is not None else 0.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if OPTIONS.nightly:
        if OPTIONS.rotation:
            _rotate(config, items)
        # The nightly tests first, the longest first by their ``chaos_nightly(minutes=N)`` hint (a stable sort keeps the
        # rest in order): parallel workers then finish close together. Without hints the 25-minute full-size parity
        # file started 36 min into a 60-minute night (2026-12-02).
        items.sort(key=_nightly_order)
        return
    keep = [i for i in items if i.get_closest_marker(NIGHTLY) is None]
    dropped = [i for i in items if i.get_closest_marker(NIGHTLY) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _rotate(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep tonight's slice of each family marked ``chaos_rotate``: one test function's parametrized members, or the
    tests of a module that name the same ``family``."""
    families: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        mark = item.get_closest_marker(ROTATE)
        if mark is not None:
            family = str(mark.kwargs.get("family") or getattr(item, "originalname", item.name))
            families.setdefault((item.path.as_posix(), family), []).append(item)
    dropped: list[pytest.Item] = []
    for members in families.values():
        mark = members[0].get_closest_marker(ROTATE)
        assert mark is not None  # a family holds marked items only
        per_night = int(mark.kwargs["per_night"])
        keep = set(tonight([i.nodeid for i in members], per_night, OPTIONS.seed))
        dropped += [i for i in members if i.nodeid not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [i for i in items if id(i) not in gone]


def chaos_examples() -> int:
    """How many examples the loaded Hypothesis profile asks for (``chaos``: 10, ``chaos-quick``: 5,
    ``chaos-nightly``: 25)."""
    profile = settings.default
    assert profile is not None  # hypothesis loads its default profile on import
    return profile.max_examples


def chaos_settings(examples: int | None = None, **kwargs: Any) -> settings:
    """Settings for a chaos property test: the loaded profile's (``--hypothesis-profile``: examples, seed policy,
    database), with no deadline and the health checks a simulated cluster trips suppressed.

    ``examples`` replaces the profile's count (a slower test takes a fifth:
    ``chaos_settings(examples=max(chaos_examples() // 5, 1))``).
    """
    return settings(
        settings.default, **{**_CHAOS_SETTINGS, "max_examples": examples or chaos_examples(), **kwargs}
    )


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:150]


@pytest.fixture
def chaos_seed() -> int:
    """This session's ``--hypothesis-seed`` as a number, 0 without one (for scenario seeds in your own tests)."""
    return OPTIONS.seed


@pytest.fixture(scope="session")
def chaos_toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Toxiproxy server for the whole session: the running one ``--chaos-toxiproxy-url`` (or
    ``$DILOCO_TOXIPROXY_URL``) names, else one started here (fails, saying how to install it, if missing)."""
    from faults.toxiproxy_server import RunningToxiproxy, ToxiproxyServer

    if OPTIONS.toxiproxy_url:
        yield RunningToxiproxy.check(OPTIONS.toxiproxy_url)
        return
    with ToxiproxyServer(log_path=tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log") as server:
        yield server


@pytest.fixture(scope="session")
def chaos_baseline_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where fault-free baselines are cached for the session (keyed by config hash).

    Parallel workers of one session (pytest-xdist) share it: each baseline is computed once, by whichever
    worker needs it first, while the others wait on its lock (chaos.controller).
    """
    import os

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory above each worker's own
    cache = root / "baselines"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture
def chaos_run_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where this test's chaos runs go: under ``--chaos-reports`` when given, else the test's tmp dir."""
    if OPTIONS.reports is None:
        return tmp_path
    module = getattr(request.node, "module", None)
    prefix = module.__name__.rsplit(".", 1)[-1] + "." if module is not None else ""
    d = OPTIONS.reports / _safe(prefix + request.node.name)
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def chaos_cluster(chaos_toxiproxy: Any, chaos_run_dir: Path) -> Iterator[Callable[..., Any]]:
    """``chaos_cluster(config=None)``: a running LocalBackend (syncer + learners behind proxies).

    Inject faults by hand (``Partition("p", ("learner-0",)).inject(cluster)``),
    watch with ``cluster.client().status()``. Everything is stopped and every
    proxy deleted after the test, whatever happened.
    """
    import uuid

    from chaos.backends.local import LocalBackend
    from trainer.config import RunConfig

    made: list[Any] = []

    def make(config: Any = None) -> Any:
        cfg = config if isinstance(config, RunConfig) else RunConfig.model_validate(config or {})
        backend = LocalBackend(
            cfg,
            chaos_run_dir / f"cluster-{len(made)}",
            chaos_toxiproxy.client(),
            tag=f"pytest-{uuid.uuid4().hex[:8]}",
        )
        made.append(backend)
        backend.bring_up()
        return backend

    try:
        yield make
    finally:
        for backend in made:
            backend.teardown()


@pytest.fixture
def run_chaos(chaos_toxiproxy: Any, chaos_baseline_cache: Path, chaos_run_dir: Path) -> Callable[..., Any]:
    """``run_chaos(scenario, baseline=True, baseline_after=False)``: a real chaos run on local processes; returns
    its RunResult (``baseline_after``: the fault-free runs after the chaos run, :class:`chaos.controller.RunOptions`).
    Ctrl-C (or SIGTERM) during the run heals and stops everything, then stops the whole pytest session."""
    from chaos.controller import Interrupted, RunOptions, run_scenario

    def run(scenario: Any, baseline: bool = True, baseline_after: bool = False) -> Any:
        out = chaos_run_dir / scenario.name
        n = 1
        while out.exists():
            n += 1
            out = chaos_run_dir / f"{scenario.name}-{n}"
        opts = RunOptions(
            out,
            toxiproxy_url=chaos_toxiproxy.url,
            baseline=baseline,
            baseline_cache=chaos_baseline_cache,
            progress=lambda m: print(m, flush=True),
            baseline_after=baseline_after,
        )
        try:
            return run_scenario(scenario, opts)
        except Interrupted as err:  # an ordinary exception would fail one test and go on to the next run
            raise KeyboardInterrupt(str(err)) from err

    return run


@pytest.fixture
def simulate_chaos() -> Callable[..., Any]:
    """``simulate_chaos(scenario, opts=None)``: the same scenario in deterministic mode; returns a SimResult."""
    from chaos.sim import simulate

    return simulate
