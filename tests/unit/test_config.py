"""Unit tests for trainer.config (typed run configuration, mode presets, overrides)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pydantic
import pytest
import yaml

from trainer.config import RunConfig, build_config, load_config, parse_overrides
from trainer.errors import ConfigError, TrainerError

REPO = Path(__file__).resolve().parents[2]


def algo(**kw):
    return build_config({"algorithm": kw}).algorithm


# ---- defaults -------------------------------------------------------------------
def test_defaults_validate():
    cfg = load_config(None)
    assert cfg == RunConfig()
    a = cfg.algorithm
    assert a.mode == "decoupled"
    for name in (
        "sync_every",
        "min_quorum",
        "grace",
        "staggered",
        "overlap_steps",
        "blocking",
        "outer_lr",
        "outer_momentum",
        "max_staleness",
    ):
        assert getattr(a, name) is not None, name  # the preset filled every optional field
    # dumping and re-validating a config is the identity
    assert RunConfig.model_validate(cfg.model_dump(mode="json")) == cfg


def test_shipped_config_files_validate():
    files = sorted((REPO / "configs").glob("*.yaml"))
    assert files, "expected at least one config under configs/"
    for f in files:
        cfg = load_config(f)
        dumped = cfg.model_dump(mode="json")

        def leaves(tree: dict, path: tuple[str, ...] = ()):
            for k, v in tree.items():
                yield from leaves(v, (*path, k)) if isinstance(v, dict) else [((*path, k), v)]

        for path, want in leaves(yaml.safe_load(f.read_text())):  # every value the file sets is the config's
            got = dumped
            for k in path:
                got = got[k]
            assert got == want, f"{f.name}: {'.'.join(path)} is {got!r}, the file says {want!r}"


# ---- mode presets (the docstring table) ---------------------------------------------
@pytest.mark.parametrize("m", [1, 3, 5])
def test_decoupled_preset(m):
    a = algo(mode="decoupled", num_learners=m, sync_every=12)
    assert (a.min_quorum, a.grace, a.staggered, a.overlap_steps, a.blocking) == (1, True, True, "auto", False)
    assert a.overlap_floor == 2  # τ sized to the round trip, never below the paper's 2
    assert a.sync_every == 12  # H: any
    assert a.max_staleness == m  # decoupled default M


@pytest.mark.parametrize("mode", ["decoupled", "sync-diloco"])
def test_h_defaults_to_8_outside_data_parallel(mode):
    assert algo(mode=mode).sync_every == 8
    assert algo(mode=mode, sync_every=3).sync_every == 3


def test_decoupled_accepts_any_quorum_up_to_m():
    a = algo(mode="decoupled", num_learners=4, min_quorum=3, overlap_steps=5, max_staleness=0)
    assert (a.min_quorum, a.overlap_steps, a.max_staleness) == (3, 5, 0)


@pytest.mark.parametrize("m", [1, 3, 5])
def test_sync_diloco_preset(m):
    a = algo(mode="sync-diloco", num_learners=m, sync_every=16)
    assert (a.min_quorum, a.grace, a.staggered, a.overlap_steps, a.blocking) == (m, False, False, 0, True)
    assert a.sync_every == 16
    assert a.max_staleness == 0


def test_sync_diloco_accepts_its_own_values_explicitly():
    a = algo(
        mode="sync-diloco",
        num_learners=3,
        min_quorum=3,
        grace=False,
        staggered=False,
        overlap_steps=0,
        blocking=True,
        max_staleness=0,
    )
    assert a.min_quorum == 3


@pytest.mark.parametrize("m", [1, 3])
def test_data_parallel_preset_fills_h_1(m):
    # The table: data-parallel has H = 1; the preset fills fields left unset.
    a = algo(mode="data-parallel", num_learners=m)
    assert (a.min_quorum, a.grace, a.staggered, a.overlap_steps, a.blocking) == (m, False, False, 0, True)
    assert (a.sync_every, a.num_fragments, a.max_staleness) == (1, 1, 0)
    # No outer SGD: the syncer applies the inner AdamW to the mean gradient.
    assert (a.outer_lr, a.outer_momentum) == (0.0, 0.0)


def test_num_fragments_defaults_to_4_outside_data_parallel_and_stays_as_given():
    assert algo(mode="decoupled").num_fragments == 4
    assert algo(mode="data-parallel", num_learners=2, num_fragments=3).num_fragments == 3


def test_data_parallel_with_explicit_h_1():
    a = algo(mode="data-parallel", num_learners=3, sync_every=1)
    assert (a.min_quorum, a.grace, a.staggered, a.overlap_steps, a.blocking) == (3, False, False, 0, True)
    assert (a.sync_every, a.max_staleness) == (1, 0)


def test_docstring_example():
    cfg = RunConfig.model_validate({"algorithm": {"mode": "sync-diloco", "num_learners": 3}})
    a = cfg.algorithm
    assert (a.min_quorum, a.grace, a.staggered, a.overlap_steps, a.blocking) == (3, False, False, 0, True)


# ---- contradictions -------------------------------------------------------------------
@pytest.mark.parametrize(
    "algorithm,needle",
    [
        (dict(mode="sync-diloco", num_learners=3, min_quorum=1), "min_quorum"),
        (dict(mode="sync-diloco", num_learners=3, grace=True), "grace"),
        (dict(mode="sync-diloco", num_learners=3, overlap_steps=2), "overlap_steps"),
        (dict(mode="sync-diloco", num_learners=3, max_staleness=1), "max_staleness"),
        (dict(mode="data-parallel", num_learners=3, sync_every=8), "sync_every"),
        (dict(mode="data-parallel", num_learners=3, sync_every=1, outer_momentum=0.9), "outer_momentum"),
        (dict(mode="data-parallel", num_learners=3, outer_lr=1.0), "outer_lr"),
        (dict(mode="data-parallel", num_learners=3, mix_alpha=0.5), "mix_alpha"),
        (dict(mode="data-parallel", num_learners=3, sync_every=1, staggered=True), "staggered"),
        (dict(mode="decoupled", num_learners=3, min_quorum=4), "min_quorum"),
    ],
)
def test_contradictions_raise_config_error_naming_source_and_field(algorithm, needle):
    with pytest.raises(ConfigError) as info:
        build_config({"algorithm": algorithm}, source="runs/exp.yaml")
    msg = str(info.value)
    assert msg.startswith("runs/exp.yaml")
    assert "algorithm" in msg
    assert needle in msg


def test_config_error_is_a_trainer_error():
    assert issubclass(ConfigError, TrainerError)


@pytest.mark.parametrize(
    "data,path",
    [
        ({"bogus": 1}, "bogus"),
        ({"algorithm": {"foo": 1}}, "algorithm.foo"),
        ({"syncer": {"checkpoint_every": 3}}, "syncer.checkpoint_every"),
    ],
)
def test_unknown_fields_are_rejected_naming_the_field(data, path):
    with pytest.raises(ConfigError) as info:
        build_config(data, source="cfg.yaml")
    assert path in str(info.value)
    assert "cfg.yaml" in str(info.value)


@pytest.mark.parametrize(
    "data,path",
    [
        ({"algorithm": {"num_learners": 0}}, "algorithm.num_learners"),
        ({"inner": {"lr": -1}}, "inner.lr"),
        ({"algorithm": {"mode": "async"}}, "algorithm.mode"),
        ({"token_budget": "lots"}, "token_budget"),
        ({"data": {"order": 2, "older_classes": 1}}, "data.older_classes"),
        ({"data": {"older_classes": 2}}, "data"),  # order 1: no older token
        ({"data": {"vocab_size": 1}}, "data.vocab_size"),
        ({"data": {"order": 2, "vocab_size": 256}}, "data"),  # a 256^3 transition table in every process
    ],
)
def test_bad_values_name_the_field(data, path):
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        build_config(data)


def test_config_is_frozen():
    cfg = RunConfig()
    with pytest.raises(pydantic.ValidationError):
        cfg.seed = 3  # type: ignore[misc]


# ---- load_config errors ------------------------------------------------------------------
def test_missing_file_names_the_file(tmp_path):
    f = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(f) in str(info.value)
    assert "cannot read" in str(info.value)


def test_invalid_yaml_names_the_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("algorithm: {mode: decoupled\n  num_learners: [\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(f) in str(info.value)
    assert "YAML" in str(info.value)


@pytest.mark.parametrize("text,kind", [("- a\n- b\n", "list"), ("42\n", "int"), ("just a string\n", "str")])
def test_non_mapping_top_level_names_the_file(tmp_path, text, kind):
    f = tmp_path / "list.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(f) in str(info.value)
    assert "mapping" in str(info.value) and kind in str(info.value)


def test_invalid_field_in_file_names_file_and_field(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({"algorithm": {"mode": "sync-diloco", "num_learners": 3, "min_quorum": 1}}))
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(f) in str(info.value) and "algorithm" in str(info.value)


def test_empty_file_is_defaults(tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("")
    assert load_config(f) == RunConfig()


def test_json_file_loads(tmp_path):
    f = tmp_path / "run.json"
    f.write_text('{"seed": 4, "algorithm": {"num_learners": 2}}')
    cfg = load_config(f)
    assert cfg.seed == 4 and cfg.algorithm.num_learners == 2


# ---- overrides -------------------------------------------------------------------------------
def test_overrides_parse_yaml_scalars():
    tree = parse_overrides(
        [
            "algorithm.min_quorum=2",
            "algorithm.grace=false",
            "seed=7",
            "algorithm.grace_gamma=0.25",
            "algorithm.mode=sync-diloco",
            "algorithm.mix_alpha=null",
        ]
    )
    assert tree == {
        "seed": 7,
        "algorithm": {
            "min_quorum": 2,
            "grace": False,
            "grace_gamma": 0.25,
            "mode": "sync-diloco",
            "mix_alpha": None,
        },
    }
    assert isinstance(tree["seed"], int) and isinstance(tree["algorithm"]["grace"], bool)


def test_overrides_apply_on_top_of_a_file(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({"seed": 1, "algorithm": {"num_learners": 4, "min_quorum": 2}}))
    cfg = load_config(f, overrides=["algorithm.min_quorum=3", "inner.lr=0.01", "seed=9"])
    assert cfg.seed == 9
    assert cfg.algorithm.num_learners == 4  # untouched sibling kept
    assert cfg.algorithm.min_quorum == 3
    assert cfg.inner.lr == pytest.approx(0.01)


def test_value_may_contain_equals_sign():
    assert parse_overrides(["a.b=x=y"]) == {"a": {"b": "x=y"}}


@pytest.mark.parametrize("bad", [["seed"], ["algorithm.min_quorum"], ["seed=1", "seed.x=2"]])
def test_bad_override_syntax_raises_config_error(bad):
    with pytest.raises(ConfigError, match="--set"):
        parse_overrides(bad)


def test_override_with_unknown_field_is_rejected():
    with pytest.raises(ConfigError, match=r"algorithm\.nope"):
        build_config({}, overrides=["algorithm.nope=1"])


def test_override_contradiction_is_rejected():
    with pytest.raises(ConfigError, match="min_quorum"):
        build_config(
            {"algorithm": {"mode": "sync-diloco", "num_learners": 3}}, overrides=["algorithm.min_quorum=1"]
        )


# ---- config_hash ------------------------------------------------------------------------------
def test_config_hash_is_stable():
    a = build_config({"seed": 3, "algorithm": {"num_learners": 2}})
    b = build_config({"algorithm": {"num_learners": 2}, "seed": 3})
    assert a.config_hash() == a.config_hash() == b.config_hash()
    assert len(a.config_hash()) == 16 and int(a.config_hash(), 16) >= 0
    # round trip through YAML keeps the hash
    assert build_config(yaml.safe_load(a.to_yaml())).config_hash() == a.config_hash()


def test_explicit_preset_values_hash_like_implicit_ones():
    implicit = build_config({"algorithm": {"mode": "sync-diloco", "num_learners": 3}})
    explicit = build_config(
        {"algorithm": {"mode": "sync-diloco", "num_learners": 3, "min_quorum": 3, "grace": False}}
    )
    assert implicit.config_hash() == explicit.config_hash()


@pytest.mark.parametrize(
    "override",
    [
        "seed=1",
        "token_budget=12345",
        "algorithm.min_quorum=2",
        "inner.lr=0.001",
        "syncer.validate_uploads=false",
        "learner.step_delay_s=0.5",
        "model.size=small",
        "algorithm.merge_rule=mean",
    ],
)
def test_config_hash_changes_when_a_field_changes(override):
    base = build_config({})
    changed = build_config({}, overrides=[override])
    assert changed != base
    assert changed.config_hash() != base.config_hash()


def test_overlap_steps_auto_is_decoupled_only_and_hashes_apart():
    """``overlap_steps: auto`` (trainer.core.grace.effective_overlap, decoupled's default): the schedule keeps the
    floor of 2; the synchronous modes require τ = 0 and say so; a fixed τ hashes apart from the default."""
    auto = build_config({"algorithm": {"mode": "decoupled", "overlap_steps": "auto"}})
    a = auto.algorithm
    assert a.overlap_auto and a.overlap_floor == 2
    fixed = build_config({"algorithm": {"mode": "decoupled", "overlap_steps": 2}})
    assert not fixed.algorithm.overlap_auto and fixed.algorithm.overlap_floor == 2
    assert fixed.config_hash() != auto.config_hash() == build_config({}).config_hash()
    with pytest.raises(ConfigError, match="overlap_steps"):
        build_config({"algorithm": {"mode": "sync-diloco", "overlap_steps": "auto"}})
    with pytest.raises(ConfigError, match="overlap_steps"):
        build_config({"algorithm": {"overlap_steps": "sometimes"}})


def test_settings_added_later_keep_old_hashes_until_set() -> None:
    """model.compute_dtype and data.source at their defaults hash as before they existed (committed measurements
    and cached baselines stay valid); set away from them, they are a different training."""
    from trainer.config import ADDED_SETTINGS

    base = RunConfig()
    tree = base.model_dump(mode="json")
    tree["syncer"].pop("audit_keep_fraction")
    tree["syncer"].pop("audit_keep_bytes")
    for section, name in ADDED_SETTINGS:
        tree[section].pop(name)
    blob = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    assert base.config_hash() == hashlib.sha256(blob.encode()).hexdigest()[:16]
    assert RunConfig.model_validate({"model": {"compute_dtype": "bfloat16"}}).config_hash() != base.config_hash()
    assert RunConfig.model_validate({"data": {"source": "text"}}).config_hash() != base.config_hash()
