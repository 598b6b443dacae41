"""The pytest plugin: options, markers, the nightly deselection and the seeded settings, in a real inner session."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest_plugins = ["pytester"]

TESTS = '''
import pytest
from hypothesis import given, strategies as st
from chaos.pytest_plugin import OPTIONS, chaos_settings

seen = []

@pytest.mark.nightly
def test_long():
    pass

def test_fast(chaos_seed):
    assert chaos_seed == OPTIONS.seed

@chaos_settings()
@given(st.integers())
def test_counted(x):
    seen.append(x)

def test_examples_used():
    assert len(seen) == OPTIONS.examples
'''


def test_nightly_tests_are_deselected_by_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    r = pytester.runpytest("-p", "no:cacheprovider", "--chaos-examples", "7")
    r.assert_outcomes(passed=3, deselected=1)
    r.stdout.fnmatch_lines(["*diloco-chaos: per-change*--chaos-examples 7 --chaos-seed 0*"])


def test_chaos_nightly_runs_them_with_the_given_seed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    r = pytester.runpytest("-p", "no:cacheprovider", "--chaos-nightly", "--chaos-seed", "42", "--chaos-examples", "3")
    r.assert_outcomes(passed=4)
    r.stdout.fnmatch_lines(["*diloco-chaos: nightly*--chaos-examples 3 --chaos-seed 42*"])


ROTATED = '''
import pytest

def test_per_change():
    pass

@pytest.mark.nightly
@pytest.mark.rotate(per_night=2)
@pytest.mark.parametrize("n", range(5))
def test_member(n):
    pass

@pytest.mark.nightly
def test_whole():
    pass
'''


@pytest.mark.parametrize(("seed", "members"), [(20261203, "01"), (20261204, "23"), (20261205, "4")])
def test_a_rotated_family_runs_tonights_slice(pytester: pytest.Pytester, seed: int, members: str) -> None:
    pytester.makepyfile(ROTATED)
    r = pytester.runpytest("-p", "no:cacheprovider", "-v", "--chaos-nightly", "--chaos-seed", str(seed))
    r.assert_outcomes(passed=len(members) + 2, deselected=5 - len(members))
    r.stdout.fnmatch_lines([f"*test_member?{m}? PASSED*" for m in members])


def test_no_rotation_runs_every_member(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ROTATED)
    r = pytester.runpytest("-p", "no:cacheprovider", "-v", "--chaos-nightly", "--chaos-no-rotation")
    r.assert_outcomes(passed=7)
    r.stdout.fnmatch_lines(["*diloco-chaos: nightly, no rotation*"])
    r.stdout.fnmatch_lines(["*test_member?4? PASSED*", "*test_whole PASSED*", "*test_per_change PASSED*"])  # long first


def test_an_inner_session_leaves_the_outer_sessions_options_alone(pytester: pytest.Pytester) -> None:
    from chaos.pytest_plugin import OPTIONS

    before = replace(OPTIONS)
    pytester.makepyfile(TESTS)
    pytester.runpytest("-p", "no:cacheprovider", "--chaos-seed", "4242", "--chaos-examples", "7", "--chaos-nightly")
    assert OPTIONS == before


def test_markers_are_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pytest
@pytest.mark.chaos
@pytest.mark.docker
@pytest.mark.simulation
@pytest.mark.rotate(per_night=1)
def test_marked():
    pass
''')
    pytester.runpytest("-p", "no:cacheprovider", "--strict-markers").assert_outcomes(passed=1)


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
