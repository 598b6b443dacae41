"""``outer_gradient`` (``rounds="arrival"``): how a late contribution enters the merge (pure syncer core, no I/O)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import syncer_policy
from trainer.config import build_config
from trainer.core.fragments import partition_tensors
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.syncer_records import Contribution
from trainer.core.syncer_state import SyncerState
from trainer.errors import ConfigError


def _state(outer_gradient: str) -> SyncerState:
    policy = syncer_policy(
        num_learners=2,
        min_quorum=1,
        outer_lr=1.0,
        outer_momentum=0.0,
        max_staleness=2,
        outer_gradient=outer_gradient,
        rounds="arrival",
    )
    st = SyncerState.create(policy, partition_tensors({"w": 2}, 1), {"w": np.zeros(2, np.float32)})
    st.join("a", "ia", now=0.0)
    st.join("b", "ib", now=0.0)
    return st


def _merge_alone(st: SyncerState, learner: str, base: int, upload: float, now: float) -> list[float]:
    inc = "ia" if learner == "a" else "ib"
    st.submit(Contribution(learner, inc, 0, base, {"w": np.full(2, upload, np.float32)}, 4, 64), now=now)
    st.merge(0, now=now)
    return st.params["w"].tolist()


def test_base_adds_a_late_groups_progress_on_top() -> None:
    # Both learners trained from version 0 to w = 1 (outer gradient -1) but merge in two groups:
    # as uploaded, the second merge adds the same progress again.
    st = _state("base")
    assert _merge_alone(st, "a", 0, -1.0, 1.0) == [1.0, 1.0]
    assert _merge_alone(st, "b", 0, -1.0, 2.0) == [2.0, 2.0]


def test_current_rebases_a_late_group_onto_the_current_value() -> None:
    # Rebased, the second merge pulls the fragment to b's parameters (w = 1), which it already holds.
    st = _state("current")
    assert _merge_alone(st, "a", 0, -1.0, 1.0) == [1.0, 1.0]
    assert _merge_alone(st, "b", 0, -1.0, 2.0) == [1.0, 1.0]
    # A learner whose parameters are ahead of the current value still moves it forward.
    assert _merge_alone(st, "a", 1, -2.0, 3.0) == [3.0, 3.0]


def test_current_refuses_a_base_it_no_longer_holds_after_a_restore() -> None:
    st = _state("current")
    _merge_alone(st, "a", 0, -1.0, 1.0)
    arrays, meta = st.to_checkpoint()
    restored = SyncerState.from_checkpoint(st.policy, st.fragments, arrays, meta, version_skip=2)
    assert restored.versions == [3]
    restored.join("b", "ib2", now=5.0)
    with pytest.raises(Rejected) as err:
        restored.submit(Contribution("b", "ib2", 0, 1, {"w": -np.ones(2, np.float32)}, 4, 64), now=5.0)
    assert err.value.reason is RejectReason.STALE_VERSION and "no longer holds base 1" in str(err.value)
    # The current version is held: a learner that fetched it contributes normally.
    assert restored.submit(Contribution("b", "ib2", 0, 3, {"w": -np.ones(2, np.float32)}, 4, 64), now=5.0).accepted


def test_only_the_last_max_staleness_versions_are_kept() -> None:
    st = _state("current")
    for i in range(6):
        _merge_alone(st, "a", i, -1.0, float(i + 1))
    assert sorted(v for _, v in st.past_values) == [4, 5, 6]


def test_config_default_and_choice() -> None:
    # On the clock every contribution is anchored at its round's start value (rebased); base is arrival-only.
    assert build_config({}).algorithm.outer_gradient == "current"
    assert build_config({"algorithm": {"rounds": "arrival"}}).algorithm.outer_gradient == "base"
    arrival_current = {"algorithm": {"rounds": "arrival", "outer_gradient": "current"}}
    assert build_config(arrival_current).algorithm.outer_gradient == "current"
    with pytest.raises(ConfigError, match="needs rounds 'arrival'"):
        build_config({"algorithm": {"outer_gradient": "base"}})
