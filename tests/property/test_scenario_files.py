"""Scenario files never crash the CLI: whatever the bytes, `validate` exits 0 or 2, and what it accepts round-trips.

Two strategies of our own: raw bytes and YAML-ish text (non-UTF-8, control characters, deep nesting, aliases,
NaN and infinities), and trees over the scenario schema (a built-in scenario with one field replaced by any
YAML value). Accepted scenarios must plan, and be written and read back exactly as report and replay read them.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.cli import main
from chaos.errors import ScenarioError
from chaos.exit_codes import ExitCode
from chaos.fault_plan import plan
from chaos.scenario import builtin_scenarios, parse_scenario
from trainer.config import MAX_DEPTH, parse_yaml_mapping

BUILTINS = {name: yaml.safe_load(p.read_text()) for name, p in builtin_scenarios().items()}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "all",
            "learner-0",
            "learner-1",
            "syncer",
            "kill",
            "pause",
            "partition",
            ".nan",
            ".inf",
            "-.inf",
            "1e999",
            "~",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


def _paths(tree, prefix=()):
    """Every path into a tree, containers included."""
    yield prefix
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated_scenarios(draw):
    """A built-in scenario's tree with one value replaced, one key added, or one key removed."""
    tree = copy.deepcopy(BUILTINS[draw(st.sampled_from(sorted(BUILTINS)))])
    path = draw(st.sampled_from(list(_paths(tree))[1:]))
    parent = tree
    for part in path[:-1]:
        parent = parent[part]
    action = draw(st.sampled_from(["replace", "add", "remove"]))
    if action == "replace" or not isinstance(parent, dict):
        parent[path[-1]] = draw(values)
    elif action == "add":
        parent[draw(st.text(min_size=1, max_size=8))] = draw(values)
    else:
        del parent[path[-1]]
    return tree


def _accepted_scenarios_round_trip(tree) -> None:
    try:
        s = parse_scenario(tree, "<hypothesis>")
    except ScenarioError as err:
        assert str(err).startswith("<hypothesis>"), err  # names the source
        return
    plan(s)  # what `run` does first with a validated scenario
    again = parse_scenario(json.loads(s.model_dump_json()), "scenario.json")  # as report and replay read it
    assert again == s


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_scenarios())
def test_any_scenario_tree_is_refused_by_name_or_plans_and_round_trips(tree):
    _accepted_scenarios_round_trip(tree)


def _finite(tree) -> bool:
    if isinstance(tree, float):
        return math.isfinite(tree)
    if isinstance(tree, dict):
        return all(_finite(v) for v in tree.values())
    if isinstance(tree, list):
        return all(_finite(v) for v in tree)
    return True


def _numeric_paths():
    for name, tree in sorted(BUILTINS.items()):
        for path in _paths(tree):
            value = tree
            for part in path:
                value = value[part]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield name, path


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_no_number_of_any_builtin_takes_a_nan_or_an_infinity(bad):
    accepted = []
    for name, path in _numeric_paths():
        tree = copy.deepcopy(BUILTINS[name])
        parent = tree
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = bad
        try:
            parse_scenario(tree, name)
        except ScenarioError as err:
            assert "finite" in str(err) or "greater" in str(err) or "less" in str(err), (name, path, err)
            continue
        accepted.append((name, path))
    assert not accepted, accepted


@settings(max_examples=200)
@given(mutated_scenarios())
def test_no_accepted_scenario_holds_a_nan_or_an_infinity(tree):
    try:
        s = parse_scenario(tree, "<hypothesis>")
    except ScenarioError:
        return
    assert _finite(json.loads(s.model_dump_json())), s


yaml_text = st.one_of(
    st.binary(max_size=200),
    st.lists(
        st.sampled_from(
            [
                "a:",
                " b",
                "- ",
                "[",
                "]",
                "{",
                "}",
                "&x ",
                "*x",
                "!!python/object ",
                "\n",
                "  ",
                ": ",
                "? ",
                ".nan",
                ".inf",
                "name: k",
                "\x00",
                "\xff",
                "é",
                "'",
                '"',
                "#",
                "|",
                ">",
                "%YAML 1.1\n",
                "---\n",
                "...\n",
                "<<: *x\n",
            ]
        ),
        max_size=40,
    ).map(lambda parts: "".join(parts).encode("utf-8", "surrogatepass")),
    st.integers(1, 3 * MAX_DEPTH).map(lambda n: b"a: " + b"[" * n + b"]" * n),
    st.builds(lambda t: yaml.safe_dump(t).encode(), mutated_scenarios()),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=yaml_text)
def test_validate_answers_0_or_2_whatever_the_bytes(raw, tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_bytes(raw)
    code = main(["validate", str(f)])  # an uncaught exception fails the test: that is the point
    out, err = capsys.readouterr()
    assert code in (ExitCode.PASS, ExitCode.ERROR)
    assert "Traceback" not in out + err
    if code == ExitCode.ERROR:
        assert str(f) in err  # the file is named


@settings(max_examples=100)
@given(raw=yaml_text)
def test_the_file_reader_raises_only_its_own_error(raw):
    try:
        parse_yaml_mapping(raw, "x.yaml", "scenario", ScenarioError)
    except ScenarioError as err:
        assert str(err).startswith("x.yaml")
