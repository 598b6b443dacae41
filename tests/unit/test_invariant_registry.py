"""Every invariant of docs/security.md has its property tests and its negative control, or is named as a gap.

The registry below says, for each invariant id of the document's tables, which tests check it over generated
input (``generated``), which check it on chosen examples (``examples``), and which negative controls run the
property with the defence removed and expect it to fail (``controls``). The tests here keep the registry honest:
its ids are exactly the document's, every test it names exists, and the gaps — an invariant without a generated
property or without an automated control — are exactly the ones listed in :data:`GAPS`, so closing a gap means
removing it there (issue 41's done-when asks for none).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Coverage:
    generated: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    controls: tuple[str, ...] = ()


HPF = "tests/integration/test_hostile_protocol.py::"
HP = HPF + "test_generated_hostile_traffic_breaks_no_invariant"
HPC = HPF + "test_outsider_and_refusal_negative_controls"  # parametrized by invariant id
HL = "tests/integration/test_hostile_learner.py::"
SS = "tests/unit/test_core_syncer_state.py::"
PR = "tests/unit/test_invariants_pace_round.py::"
CT = "tests/unit/test_checkpoint_tampering.py::"
SR = "tests/integration/test_syncer_restore.py::"
IC = "tests/unit/test_invariants_claims.py::"
DL = "tests/integration/test_invariant_deadline.py::"
RV = "tests/unit/test_restore_versions.py::"
DR = "tests/unit/test_invariants_drift.py::"

REGISTRY: dict[str, Coverage] = {
    "weight": Coverage(
        generated=(IC + "test_no_claim_weighs_more_than_the_steps_time_allows",),
        controls=(IC + "test_weight_negative_control",),
        examples=(
            SS + "test_step_counts_are_capped_by_time_at_the_clusters_pace_and_tokens_derived",
            HL + "test_self_declared_tokens_cannot_take_over_a_merge",
        ),
    ),
    "pace": Coverage(
        generated=(PR + "test_insiders_move_the_pace_no_further_than_the_honest_step_times", HP),
        controls=(PR + "test_pace_negative_control",),
    ),
    "budget": Coverage(
        generated=(HP, IC + "test_no_report_pattern_counts_more_tokens_than_time_allows"),
        controls=(IC + "test_budget_negative_control",),
        examples=(
            SS + "test_reports_sent_often_count_no_faster_than_time_allows",
            SS + "test_cycling_incarnations_counts_no_faster_than_time_allows",
        ),
    ),
    "value": Coverage(
        generated=(IC + "test_no_coordinate_moves_further_than_its_steps_can",),
        examples=(SS + "test_no_coordinate_moves_further_than_its_steps_of_adamw_can",),
        controls=(IC + "test_value_negative_control",),
    ),
    "drift": Coverage(
        generated=(DR + "test_no_learner_pulls_further_than_the_drift_bound_and_no_honest_one_is_refused",),
        examples=(DR + "test_a_steady_push_is_refused_once_over_the_bound",),
        controls=(DR + "test_drift_negative_control",),
    ),
    "round": Coverage(
        generated=(PR + "test_insiders_stretch_no_round_beyond_what_the_honest_uploads_need",),
        examples=(PR + "test_the_hold_follows_the_median_learner_one_value_each",),
        controls=(PR + "test_round_negative_control",),
    ),
    "refusal": Coverage(
        generated=(HP,), examples=(SS + "test_a_refused_upload_or_report_changes_nothing",), controls=(HPC,)
    ),
    "outsider-state": Coverage(generated=(HP,), controls=(HPC,)),
    "outsider-series": Coverage(generated=(HP,), controls=(HPC,)),
    "capacity": Coverage(
        generated=(HP,),
        examples=(
            HL + "test_calls_opened_and_never_sent_cannot_starve_status_and_health",
            HL + "test_long_calls_cannot_starve_status_and_health",
        ),
        controls=(HPF + "test_capacity_negative_control",),
    ),
    "restore-integrity": Coverage(
        generated=(CT + "test_a_restore_serves_only_what_this_run_wrote_under_that_name",),
        examples=(SR + "test_a_restore_skips_a_checkpoint_that_is_not_intact",),
        controls=(CT + "test_restore_integrity_negative_control",),
    ),
    "restore-versions": Coverage(
        generated=(RV + "test_every_restart_serves_versions_above_every_one_served_before",),
        controls=(RV + "test_restore_versions_negative_control",),
        examples=(
            SR + "test_an_unreadable_newer_checkpoint_adds_an_interval_to_the_skip",
            SR + "test_with_no_intact_checkpoint_the_syncer_refuses_to_start_unless_told_to_start_fresh",
        ),
    ),
    "deadline": Coverage(
        generated=(DL + "test_no_call_outlives_the_cap",),
        examples=(
            HL + "test_a_stalled_upload_is_cancelled_after_the_cap",
            HL + "test_a_call_whose_request_never_comes_is_cancelled",
        ),
        controls=(DL + "test_deadline_negative_control",),
    ),
    "concurrency": Coverage(
        generated=(HP,),
        examples=(
            HL + "test_long_calls_cannot_starve_status_and_health",
            HL + "test_a_flood_of_short_calls_cannot_starve_status",
        ),
        controls=(HPF + "test_concurrency_negative_control",),
    ),
    "output": Coverage(
        generated=(HP,),
        examples=(
            "tests/unit/test_merge_audit.py::test_kept_audit_files_stay_within_their_byte_bound_across_a_restart",
            HL + "test_an_outsiders_flood_costs_the_log_one_line_per_kind_and_window",
        ),
        controls=(HPC,),
    ),
}

# Invariants without a generated property test, and without an automated negative control (a manual one: the
# defence removed by hand, the test seen failing, the code restored). None left; a new invariant starts here.
GAPS_GENERATED: set[str] = set()
GAPS_CONTROL: set[str] = set()


def documented_ids() -> list[str]:
    """The invariant ids of docs/security.md's tables (rows of the section "Invariants")."""
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.M)


def test_the_registry_names_exactly_the_documented_invariants() -> None:
    ids = documented_ids()
    assert len(ids) == len(set(ids)) and ids, ids
    assert set(ids) == set(REGISTRY), (sorted(set(ids) - set(REGISTRY)), sorted(set(REGISTRY) - set(ids)))


def test_every_test_the_registry_names_exists() -> None:
    defined: dict[str, set[str]] = {}
    for cov in REGISTRY.values():
        for node in cov.generated + cov.examples + cov.controls:
            path, name = node.split("::")
            if path not in defined:
                tree = ast.parse((ROOT / path).read_text())
                defined[path] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert name in defined[path], f"{node} does not exist: update tests/unit/test_invariant_registry.py"


def test_the_gaps_are_exactly_the_ones_listed() -> None:
    no_generated = {i for i, c in REGISTRY.items() if not c.generated}
    no_control = {i for i, c in REGISTRY.items() if not c.controls}
    assert no_generated == GAPS_GENERATED, (sorted(no_generated ^ GAPS_GENERATED), "update GAPS_GENERATED")
    assert no_control == GAPS_CONTROL, (sorted(no_control ^ GAPS_CONTROL), "update GAPS_CONTROL")


def test_a_missing_test_or_an_undocumented_id_fails_the_registry(monkeypatch) -> None:
    """Negative control: the registry's own checks fail on a wrong registry."""
    monkeypatch.setitem(REGISTRY, "made-up", Coverage())
    with pytest.raises(AssertionError):
        test_the_registry_names_exactly_the_documented_invariants()
    monkeypatch.delitem(REGISTRY, "made-up")
    monkeypatch.setitem(REGISTRY, "pace", Coverage(generated=(PR + "test_that_does_not_exist",)))
    with pytest.raises(AssertionError):
        test_every_test_the_registry_names_exists()


def test_the_parametrized_controls_are_the_invariants_that_name_them() -> None:
    """The hostile protocol's parametrized control runs one case per invariant id (its ``CONTROLS`` keys): exactly
    the invariants whose controls name it."""
    path, name = HPC.split("::")
    tree = ast.parse((ROOT / path).read_text())
    (controls,) = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONTROLS" for t in n.targets)
    ]
    assert isinstance(controls, ast.Dict)
    cases = {k.value for k in controls.keys if isinstance(k, ast.Constant)}
    assert cases == {i for i, c in REGISTRY.items() if HPC in c.controls}, cases
