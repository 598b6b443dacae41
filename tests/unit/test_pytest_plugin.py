"""The pytest plugin: options, markers, the nightly deselection, the Hypothesis profiles, in real inner sessions."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import pytest
from hypothesis import given, strategies as st
from chaos.pytest_plugin import OPTIONS, chaos_examples, chaos_settings

seen = []

@pytest.mark.chaos_nightly
def test_long():
    pass

def test_fast(chaos_seed):
    assert chaos_seed == OPTIONS.seed

@chaos_settings()
@given(st.integers())
def test_counted(x):
    seen.append(x)

def test_examples_used():
    assert len(seen) == chaos_examples()

def test_example_database_is_hypothesis_own():
    # left on, except where the profile derandomizes (then Hypothesis itself turns it off: nothing to replay)
    assert (chaos_settings().database is None) == chaos_settings().derandomize
"""

# Each inner session that names a Hypothesis profile or seed runs in a subprocess: Hypothesis loads them into
# globals, which an in-process inner session would leave set for this session's later tests.


def test_nightly_tests_are_deselected_by_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hypothesis-profile", "chaos")
    r.assert_outcomes(passed=4, deselected=1)
    r.stdout.fnmatch_lines(["*diloco-chaos: per-change*Hypothesis profile chaos: 10 examples, seed 0*"])


def test_the_quick_profile_halves_the_examples(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hypothesis-profile", "chaos-quick")
    r.assert_outcomes(passed=4, deselected=1)
    r.stdout.fnmatch_lines(["*diloco-chaos: per-change*Hypothesis profile chaos-quick: 5 examples, seed 0*"])


def test_chaos_nightly_runs_them_with_hypothesis_seed_and_profile(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    r = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--chaos-nightly",
        "--hypothesis-seed",
        "42",
        "--hypothesis-profile",
        "chaos-nightly",
    )
    r.assert_outcomes(passed=5)
    r.stdout.fnmatch_lines(["*diloco-chaos: nightly*Hypothesis profile chaos-nightly: 25 examples, seed 42*"])


def test_a_projects_own_nightly_marker_is_left_alone(pytester: pytest.Pytester) -> None:
    """Installed into another project, the plugin deselects only its own chaos_nightly tests: the project's
    `nightly` tests run, and its Hypothesis tests keep Hypothesis's own profile (no profile of ours is loaded: "default", or "ci" where
    Hypothesis sees a CI machine, as on ours)."""
    pytester.makeini("[pytest]\nmarkers =\n    nightly: this project's own slow tests\n")
    pytester.makepyfile("""
import pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.nightly
def test_theirs():
    pass

@pytest.mark.chaos_nightly
def test_ours():
    pass

@given(st.integers())
def test_profile_is_theirs(x):
    assert settings.get_current_profile_name() in ("default", "ci")
""")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-v")
    r.assert_outcomes(passed=2, deselected=1)
    r.stdout.fnmatch_lines(["*test_theirs PASSED*"])


ROTATED = """
import pytest

def test_per_change():
    pass

@pytest.mark.chaos_nightly
@pytest.mark.chaos_rotate(per_night=2)
@pytest.mark.parametrize("n", range(5))
def test_member(n):
    pass

@pytest.mark.chaos_nightly
def test_whole():
    pass
"""


@pytest.mark.parametrize(("seed", "members"), [(20261203, "01"), (20261204, "23"), (20261205, "4")])
def test_a_rotated_family_runs_tonights_slice(pytester: pytest.Pytester, seed: int, members: str) -> None:
    pytester.makepyfile(ROTATED)
    r = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "--chaos-nightly", "--hypothesis-seed", str(seed)
    )
    r.assert_outcomes(passed=len(members) + 2, deselected=5 - len(members))
    r.stdout.fnmatch_lines([f"*test_member?{m}? PASSED*" for m in members])


def test_no_rotation_runs_every_member(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ROTATED)
    r = pytester.runpytest("-p", "no:cacheprovider", "-v", "--chaos-nightly", "--chaos-no-rotation")
    r.assert_outcomes(passed=7)
    r.stdout.fnmatch_lines(["*diloco-chaos: nightly, no rotation*"])
    r.stdout.fnmatch_lines(
        ["*test_member?4? PASSED*", "*test_whole PASSED*", "*test_per_change PASSED*"]
    )  # long first


def test_an_inner_session_leaves_the_outer_sessions_options_alone(pytester: pytest.Pytester, tmp_path) -> None:
    from chaos.pytest_plugin import OPTIONS

    before = replace(OPTIONS)
    pytester.makepyfile(ROTATED)
    pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--chaos-nightly",
        "--chaos-no-rotation",
        "--chaos-reports",
        str(tmp_path),
        "--chaos-toxiproxy-url",
        "http://127.0.0.1:1",
    )
    assert OPTIONS == before


def test_markers_are_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
import pytest
@pytest.mark.chaos
@pytest.mark.chaos_docker
@pytest.mark.chaos_simulation
@pytest.mark.chaos_rotate(per_night=1)
def test_marked():
    pass
""")
    pytester.runpytest("-p", "no:cacheprovider", "--strict-markers").assert_outcomes(passed=1)


def test_a_toxiproxy_url_nobody_answers_at_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_uses_it(chaos_toxiproxy):\n    pass\n")
    r = pytester.runpytest("-p", "no:cacheprovider", "--chaos-toxiproxy-url", "http://127.0.0.1:1")
    r.assert_outcomes(errors=1)
    r.stdout.fnmatch_lines(["*no Toxiproxy server answers at http://127.0.0.1:1*"])


INTERRUPTED = """
import pytest
import chaos.controller


@pytest.fixture
def chaos_toxiproxy():  # no server: the run below is interrupted before it would need one
    class NoServer:
        url = "http://127.0.0.1:1"
    return NoServer()


@pytest.fixture(autouse=True)
def ctrl_c_mid_run(monkeypatch):
    def interrupted(scenario, opts):
        raise chaos.controller.Interrupted("interrupted; every fault was healed and every process stopped")
    monkeypatch.setattr(chaos.controller, "run_scenario", interrupted)


def test_interrupted_run(run_chaos):
    from chaos.scenario import scenario_with
    run_chaos(scenario_with("kill-and-rejoin"))


def test_next_run():
    pass
"""


def test_ctrl_c_during_a_chaos_run_stops_the_session(pytester: pytest.Pytester) -> None:
    """The controller heals, stops and raises Interrupted; the session must stop there, not run the next test."""
    pytester.makepyfile(INTERRUPTED)
    r = pytester.runpytest("-p", "no:cacheprovider", no_reraise_ctrlc=True)  # (in process: not into this session)
    assert r.ret == pytest.ExitCode.INTERRUPTED, r.stdout.str()
    r.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    assert "test_next_run" not in r.stdout.str() and r.parseoutcomes().get("passed", 0) == 0
