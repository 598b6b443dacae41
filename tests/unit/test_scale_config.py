"""Unit tests for chaos.scale.quantities and chaos.scale.config (units in plans, the typed plan, its errors)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from chaos.errors import ChaosError, ScenarioError
from chaos.scale import ScaleConfig, build_scale_config, load_scale_config
from chaos.scale.quantities import (
    DAY,
    YEAR,
    format_count,
    format_duration,
    parse_count,
    parse_duration,
    parse_gbps,
)


# ---- parse_duration ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        (30, 30.0),
        (2.5, 2.5),
        ("30", 30.0),
        ("30s", 30.0),
        ("500ms", 0.5),
        ("2min", 120.0),
        ("1.5h", 5400.0),
        ("7d", 7 * DAY),
        ("2w", 14 * DAY),
        ("1y", YEAR),
        (" 3 h ", 3 * 3600.0),
        ("1e3", 1000.0),
        ("1e3s", 1000.0),
        (".5s", 0.5),
    ],
)
def test_parse_duration_accepts_numbers_and_units(raw, seconds):
    """Seconds come from a bare number or a number with one of the time units (y = 365 d)."""
    assert parse_duration(raw) == pytest.approx(seconds)
    assert isinstance(parse_duration(raw), float)


@pytest.mark.parametrize("raw", ["soon", "7 days", "5 sec", "", "-5s", "1.2.3s", "s", "5m", "3hh"])
def test_parse_duration_refuses_garbage_naming_the_value(raw):
    """A string that is not a number with a known unit is refused, and the message quotes it."""
    with pytest.raises(ValueError) as exc:
        parse_duration(raw)
    assert repr(raw) in str(exc.value)
    assert "not a duration" in str(exc.value)


@pytest.mark.parametrize("raw", [True, False])
def test_parse_duration_refuses_booleans(raw):
    """YAML's yes/no must not become 1 s / 0 s."""
    with pytest.raises(ValueError, match=repr(raw)):
        parse_duration(raw)


# ---- parse_count -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (7, 7.0),
        (2.5, 2.5),
        ("2400000", 2.4e6),
        ("2.4M", 2.4e6),
        ("150k", 1.5e5),
        ("150K", 1.5e5),
        ("12B", 12e9),
        ("12G", 12e9),
        ("3T", 3e12),
        (" 5 k ", 5e3),
        ("1e6", 1e6),
    ],
)
def test_parse_count_accepts_numbers_and_suffixes(raw, value):
    """Counts take k/K, M, G = B, T suffixes."""
    assert parse_count(raw) == pytest.approx(value)


@pytest.mark.parametrize("raw", ["many", "12 bn", "M", "1.2.3", "-4", "2m", "4kk", ""])
def test_parse_count_refuses_garbage_naming_the_value(raw):
    """An unknown suffix or a non-number is refused with a message quoting the value."""
    with pytest.raises(ValueError) as exc:
        parse_count(raw)
    assert repr(raw) in str(exc.value)
    assert "not a number" in str(exc.value)


def test_parse_count_refuses_booleans():
    """True is not a count of 1."""
    with pytest.raises(ValueError, match="True"):
        parse_count(True)


# ---- parse_gbps --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "gbps"),
    [
        (2, 2.0),
        (0, 0.0),
        (0.5, 0.5),
        ("3", 3.0),
        ("5Gbps", 5.0),
        ("200Mbps", 0.2),
        ("100Kbps", 1e-4),
        (" 10 Gbps ", 10.0),
    ],
)
def test_parse_gbps_accepts_numbers_and_units(raw, gbps):
    """Bandwidth is Gbit/s, from a number or a Gbps/Mbps/Kbps quantity."""
    assert parse_gbps(raw) == pytest.approx(gbps)


@pytest.mark.parametrize("raw", ["fast", "5 GB/s", "5gbps", "Gbps", "-1Gbps", True])
def test_parse_gbps_refuses_garbage_naming_the_value(raw):
    """A bandwidth that is not a number with Gbps/Mbps/Kbps is refused, quoting the value."""
    with pytest.raises(ValueError) as exc:
        parse_gbps(raw)
    assert repr(raw) in str(exc.value)
    assert "not a bandwidth" in str(exc.value)


@settings(max_examples=30, deadline=None)
@given(
    st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False),
    st.sampled_from(["ms", "s", "min", "h", "d", "w", "y"]),
)
def test_parse_duration_scales_by_the_unit(number, unit):
    """``<x><unit>`` is x times the unit's length in seconds."""
    size = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY, "y": YEAR}[unit]
    assert parse_duration(f"{number!r}{unit}") == pytest.approx(number * size)


def test_format_helpers_pick_a_readable_unit():
    """format_duration / format_count choose the largest unit that keeps the number readable."""
    assert format_duration(2 * YEAR) == "2.0 y"
    assert format_duration(7200) == "2.0 h"
    assert format_duration(0.5) == "0.5 s"
    assert format_count(2.4e6) == "2.4M"
    assert format_count(999) == "999"


# ---- build_scale_config: values ------------------------------------------------------
def test_plan_quantities_take_units():
    """Durations, counts and bandwidths in a plan tree accept the human units."""
    cfg = build_scale_config(
        {
            "duration": "2d",
            "token_budget": "12B",
            "cluster": {"chips": "2.4M"},
            "workload": {"step_s": "500ms", "params": "70B", "tokens_per_step": "16M"},
            "failures": {"mtbi_per_chip": "1y", "schedule": [{"at": "1h", "learner": 0, "down_s": "2min"}]},
            "recovery": {"restart_s": "1min"},
            "network": {"bandwidth": "200Mbps", "latency": "20ms"},
        }
    )
    assert cfg.duration == 2 * DAY
    assert cfg.token_budget == 12e9
    assert cfg.cluster.chips == 2.4e6
    assert cfg.workload.step_s == 0.5 and cfg.workload.params == 70e9 and cfg.workload.tokens_per_step == 16e6
    assert cfg.failures.mtbi_per_chip == YEAR
    assert cfg.failures.schedule[0].at == 3600.0 and cfg.failures.schedule[0].down_s == 120.0
    assert cfg.recovery.restart_s == 60.0
    assert cfg.network.bandwidth == pytest.approx(0.2) and cfg.network.latency == pytest.approx(0.02)


def test_derived_properties():
    """chips_per_learner, model_bytes, step times and the nominal token rate follow from the plan."""
    cfg = build_scale_config(
        {
            "cluster": {"chips": 1000},
            "workload": {
                "params": "1B",
                "bytes_per_param": 0.5,
                "tokens_per_step": 2000,
                "step_s": 2,
                "step_s_overrides": {"3": 4},
            },
            "algorithm": {"mode": "decoupled", "num_learners": 4},
        }
    )
    assert cfg.chips_per_learner == 250.0
    assert cfg.model_bytes == 0.5e9
    assert [cfg.step_s(i) for i in range(4)] == [2, 2, 2, 4]
    assert cfg.nominal_tokens_per_s == pytest.approx(3 * 500 / 2 + 500 / 4)  # 500 tokens per learner step


@pytest.mark.parametrize(
    "tree, message",
    [
        ({"workload": {"step_s_overrides": {4: 1}}, "algorithm": {"num_learners": 4}}, "step_s_overrides.4"),
        ({"workload": {"step_s_overrides": {0: 2}}, "algorithm": {"mode": "data-parallel"}}, "one job stepping"),
    ],
)
def test_bad_step_overrides_are_refused(tree, message):
    """A step override for a learner that does not exist, or for the one data-parallel job, is refused."""
    with pytest.raises(ScenarioError, match=message):
        build_scale_config(tree, "plan.yaml")


def test_plan_is_frozen():
    """A validated plan cannot be changed in place."""
    cfg = build_scale_config({})
    with pytest.raises(ValidationError, match="frozen"):
        cfg.seed = 3  # type: ignore[misc]
    assert cfg.seed == 0


def test_none_tree_gives_the_defaults():
    """No tree at all is the default plan, equal to the model's own defaults."""
    assert build_scale_config(None) == build_scale_config({}) == ScaleConfig.model_validate({})


def test_mode_presets_apply_to_the_algorithm_section():
    """The algorithm section is the trainer's: sync-diloco forces K = M and no grace, decoupled keeps them free."""
    sync = build_scale_config({"algorithm": {"mode": "sync-diloco", "num_learners": 5}}).algorithm
    assert sync.min_quorum == 5 and sync.grace is False and sync.overlap_steps == 0
    dec = build_scale_config({"algorithm": {"mode": "decoupled", "num_learners": 5, "min_quorum": 2}}).algorithm
    assert dec.min_quorum == 2 and dec.grace is True


# ---- build_scale_config: errors ------------------------------------------------------
def _error(tree, source="plan.yaml", overrides=None) -> str:
    with pytest.raises(ScenarioError) as exc:
        build_scale_config(tree, source, overrides)
    return str(exc.value)


def test_error_names_source_and_field_path():
    """A bad value is reported as ``<source>: invalid scale plan`` plus ``section.field: reason``."""
    msg = _error({"cluster": {"chips": -1}})
    assert msg.startswith("plan.yaml: invalid scale plan")
    assert "cluster.chips" in msg
    assert "greater than or equal to 1" in msg


def test_error_for_a_bad_unit_names_field_and_value():
    """A quantity that does not parse names its field path and the bad text."""
    msg = _error({"workload": {"step_s": "soon"}}, source="my-plan.yaml")
    assert "my-plan.yaml" in msg
    assert "workload.step_s" in msg
    assert "'soon' is not a duration" in msg


def test_error_for_a_bad_scheduled_failure_names_its_index():
    """A field inside the failure schedule is reported with its list index."""
    msg = _error({"failures": {"schedule": [{"at": 1, "learner": 0}, {"at": -5, "learner": 0}]}})
    assert "failures.schedule.1.at" in msg


def test_every_bad_field_is_reported():
    """Several bad fields give one line each."""
    msg = _error({"cluster": {"chips": 0}, "duration": 0, "network": {"dp_overlap": 2}})
    for path in ("cluster.chips", "duration", "network.dp_overlap"):
        assert path in msg, path


@pytest.mark.parametrize(
    ("tree", "path"),
    [
        ({"bogus": 1}, "bogus"),
        ({"cluster": {"chipz": 5}}, "cluster.chipz"),
        ({"recovery": {"restart": 5}}, "recovery.restart"),
        ({"algorithm": {"mode": "decoupled", "fragments": 4}}, "algorithm.fragments"),
        ({"failures": {"schedule": [{"at": 1, "learner": 0, "when": 2}]}}, "failures.schedule.0.when"),
    ],
)
def test_unknown_keys_are_refused(tree, path):
    """A misspelt key is an error naming where it is, never silently ignored."""
    msg = _error(tree)
    assert path in msg
    assert "Extra inputs are not permitted" in msg


def test_non_mapping_tree_is_refused_naming_the_source():
    """A plan that is a list (or a scalar) is refused with the source and the type it was."""
    with pytest.raises(ScenarioError, match=r"^plan\.yaml: a scale plan must be a mapping.*got list"):
        build_scale_config([1, 2], "plan.yaml")  # type: ignore[arg-type]
    with pytest.raises(ScenarioError, match="got str"):
        build_scale_config("chips: 5", "plan.yaml")  # type: ignore[arg-type]


def test_scenario_error_is_a_chaos_error():
    """Plan errors belong to the chaos package's hierarchy (the CLI's exit-code mapping relies on it)."""
    with pytest.raises(ChaosError):
        build_scale_config({"duration": -1})


# ---- data-parallel: one job ------------------------------------------------------------
def test_data_parallel_fills_in_one_learner():
    """mode data-parallel without num_learners gets num_learners = 1 and the per-step all-reduce preset."""
    cfg = build_scale_config({"cluster": {"chips": 1000}, "algorithm": {"mode": "data-parallel"}})
    assert cfg.algorithm.num_learners == 1
    assert cfg.algorithm.sync_every == 1
    assert cfg.algorithm.min_quorum == 1
    assert cfg.chips_per_learner == 1000.0


def test_data_parallel_accepts_an_explicit_single_learner():
    """Saying num_learners = 1 explicitly is fine."""
    cfg = build_scale_config({"algorithm": {"mode": "data-parallel", "num_learners": 1}})
    assert cfg.algorithm.num_learners == 1


@pytest.mark.parametrize("m", [2, 8])
def test_data_parallel_refuses_several_learners(m):
    """data-parallel with num_learners != 1 is refused with a message saying what to set."""
    msg = _error({"algorithm": {"mode": "data-parallel", "num_learners": m}})
    assert "plan.yaml" in msg
    assert "data-parallel is one job" in msg
    assert "algorithm.num_learners = 1" in msg


def test_data_parallel_by_override_also_gets_one_learner():
    """Switching to data-parallel with --set fills M = 1 too (overrides are merged before validation)."""
    cfg = build_scale_config({"cluster": {"chips": 64}}, overrides=["algorithm.mode=data-parallel"])
    assert cfg.algorithm.mode == "data-parallel"
    assert cfg.algorithm.num_learners == 1


def test_more_learners_than_chips_is_refused():
    """Each learner needs at least one chip; the message names cluster.chips and the count."""
    msg = _error({"cluster": {"chips": 3}, "algorithm": {"mode": "decoupled", "num_learners": 4}})
    assert "4 learners need at least as many chips" in msg
    assert "cluster.chips = 3" in msg


# ---- the failure schedule ----------------------------------------------------------------
def test_schedule_learner_out_of_range_is_refused_naming_the_index():
    """A scheduled failure on a learner that does not exist names its index and the valid range."""
    msg = _error(
        {
            "algorithm": {"mode": "sync-diloco", "num_learners": 2},
            "failures": {"schedule": [{"at": 1, "learner": 1}, {"at": 5, "learner": 2}]},
        }
    )
    assert "failures.schedule[1].learner = 2" in msg
    assert "only 2 learner(s) (0..1)" in msg
    assert "schedule[0]" not in msg


def test_schedule_learner_must_be_zero_for_data_parallel():
    """Data-parallel has one unit, learner 0; learner 1 is out of range."""
    msg = _error({"algorithm": {"mode": "data-parallel"}, "failures": {"schedule": [{"at": 1, "learner": 1}]}})
    assert "failures.schedule[0].learner = 1" in msg


def test_schedule_defaults_down_s_to_none():
    """A scheduled failure without down_s uses the recovery defaults (down_s None)."""
    cfg = build_scale_config(
        {
            "algorithm": {"mode": "decoupled", "num_learners": 3},
            "failures": {"schedule": [{"at": "10min", "learner": 2}]},
        }
    )
    (f,) = cfg.failures.schedule
    assert (f.at, f.learner, f.down_s) == (600.0, 2, None)


# ---- overrides -------------------------------------------------------------------------------
def test_override_sets_a_field_with_units():
    """``cluster.chips=2.4M`` sets the chip count, with the unit parsed."""
    cfg = build_scale_config({}, overrides=["cluster.chips=2.4M"])
    assert cfg.cluster.chips == 2.4e6


def test_override_wins_over_the_tree_and_keeps_siblings():
    """An override replaces one leaf and leaves the rest of its section as the tree gave it."""
    tree = {"cluster": {"chips": 100, "sites": 3}, "seed": 4}
    cfg = build_scale_config(tree, overrides=["cluster.chips=150k", "seed=9", "network.bandwidth=5Gbps"])
    assert cfg.cluster.chips == 150_000 and cfg.cluster.sites == 3
    assert cfg.seed == 9
    assert cfg.network.bandwidth == 5.0
    assert tree == {"cluster": {"chips": 100, "sites": 3}, "seed": 4}  # the caller's tree is untouched


def test_override_values_are_yaml_scalars():
    """Override values parse as YAML: false is a boolean, 3 an integer."""
    cfg = build_scale_config(
        {}, overrides=["elastic=false", "algorithm.num_learners=3", "algorithm.mode=sync-diloco"]
    )
    assert cfg.elastic is False
    assert cfg.algorithm.num_learners == 3
    assert cfg.algorithm.min_quorum == 3


def test_override_without_equals_is_refused():
    """An override that is not KEY=VALUE raises ScenarioError quoting it."""
    with pytest.raises(ScenarioError, match="cluster.chips"):
        build_scale_config({}, overrides=["cluster.chips"])


def test_override_with_unknown_key_names_it():
    """An override of a field that does not exist is an error naming the path."""
    msg = _error({}, source="p.yaml", overrides=["cluster.gpus=8"])
    assert "p.yaml" in msg and "cluster.gpus" in msg


def test_override_with_bad_value_names_field():
    """An override whose value does not parse names the field and the value."""
    msg = _error({}, overrides=["duration=forever"])
    assert "duration" in msg and "'forever'" in msg


# ---- load_scale_config -------------------------------------------------------------------------
def test_load_reads_yaml_and_applies_overrides(tmp_path):
    """A YAML plan file loads; overrides are laid over it."""
    p = tmp_path / "plan.yaml"
    p.write_text("name: week\nduration: 3d\ncluster:\n  chips: 150k\nalgorithm:\n  mode: data-parallel\n")
    cfg = load_scale_config(p, overrides=["cluster.sites=2"])
    assert cfg.name == "week"
    assert cfg.duration == 3 * DAY
    assert cfg.cluster.chips == 150_000 and cfg.cluster.sites == 2
    assert cfg.algorithm.num_learners == 1


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "cannot read"),
        ("cluster: [chips: 5\n", "not valid YAML"),
        ("- 1\n- 2\n", "mapping"),
        ("just a string\n", "mapping"),
        ("42\n", "mapping"),
    ],
)
def test_unloadable_file_names_the_path(tmp_path, text, message):
    """A missing file, broken YAML, or a top level that is not a mapping raises ScenarioError naming the file."""
    p = tmp_path / "plan.yaml"
    if text is not None:
        p.write_text(text)
    with pytest.raises(ScenarioError) as exc:
        load_scale_config(p)
    assert str(p) in str(exc.value)
    assert message in str(exc.value)


def test_load_invalid_field_names_the_file_and_field(tmp_path):
    """A bad field in a file is reported against that file's path."""
    p = tmp_path / "bad.yaml"
    p.write_text("cluster:\n  sites: 0\n")
    with pytest.raises(ScenarioError) as exc:
        load_scale_config(p)
    assert str(exc.value).startswith(f"{p}: invalid scale plan")
    assert "cluster.sites" in str(exc.value)
