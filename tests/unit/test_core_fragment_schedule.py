"""Unit tests for trainer.core.fragment_schedule (the staggered fragment schedule)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.core.fragment_schedule import FragmentSchedule

SETTINGS = settings(max_examples=80, deadline=None)


@st.composite
def staggered_schedules(draw, max_p_over_h: int = 1):
    h = draw(st.integers(min_value=1, max_value=32))
    p = draw(st.integers(min_value=1, max_value=h * max_p_over_h))
    tau = draw(st.integers(min_value=0, max_value=6))
    return FragmentSchedule(num_fragments=p, sync_every=h, overlap_steps=tau, staggered=True)


@SETTINGS
@given(staggered_schedules(max_p_over_h=2), st.integers(min_value=1, max_value=200))
def test_staggered_each_fragment_syncs_once_per_h_consecutive_steps(s, start):
    h = s.sync_every
    counts = Counter(p for step in range(start, start + h) for p in s.due(step))
    assert counts == Counter({p: 1 for p in range(s.num_fragments)})


@SETTINGS
@given(staggered_schedules())
def test_staggered_offsets_spread_over_one_to_h(s):
    h, p = s.sync_every, s.num_fragments
    offsets = [s.offset(i) for i in range(p)]
    assert all(1 <= o <= h for o in offsets)
    assert offsets == sorted(set(offsets))  # distinct and increasing when P <= H
    assert offsets[-1] == h
    gaps = [b - a for a, b in zip([0] + offsets, offsets)]
    assert set(gaps) <= {h // p, -(-h // p)}  # even spread: floor or ceil of H/P


@SETTINGS
@given(st.integers(min_value=1, max_value=32), st.integers(min_value=0, max_value=4))
def test_p_equal_h_gives_one_fragment_per_step(h, tau):
    s = FragmentSchedule(num_fragments=h, sync_every=h, overlap_steps=tau, staggered=True)
    for step in range(1, 3 * h + 1):
        assert s.due(step) == ((step - 1) % h,)


@SETTINGS
@given(
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=0, max_value=4),
)
def test_unstaggered_all_fragments_sync_at_multiples_of_h(p, h, tau):
    s = FragmentSchedule(num_fragments=p, sync_every=h, overlap_steps=tau, staggered=False)
    for step in range(1, 4 * h + 1):
        expected = tuple(range(p)) if step % h == 0 else ()
        assert s.due(step) == expected
    assert all(s.offset(i) == h for i in range(p))


def test_no_sync_before_the_first_step():
    s = FragmentSchedule(num_fragments=1, sync_every=1, overlap_steps=0, staggered=True)
    assert s.due(1) == (0,)
    assert s.due(0) == ()
    assert s.due(-3) == ()


@SETTINGS
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=50))
def test_apply_step_is_sync_step_plus_tau(step, tau):
    s = FragmentSchedule(num_fragments=2, sync_every=4, overlap_steps=tau)
    assert s.apply_step(step) == step + tau


def test_docstring_example():
    s = FragmentSchedule(num_fragments=4, sync_every=4, overlap_steps=2, staggered=True)
    assert [s.due(step) for step in range(1, 9)] == [(0,), (1,), (2,), (3,)] * 2
    assert s.apply_step(5) == 7


def test_paper_setting_p_equals_h_equals_24():
    s = FragmentSchedule(num_fragments=24, sync_every=24, overlap_steps=2)
    assert [s.offset(p) for p in range(24)] == list(range(1, 25))


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(num_fragments=0, sync_every=4, overlap_steps=1), "num_fragments"),
        (dict(num_fragments=2, sync_every=0, overlap_steps=1), "sync_every"),
        (dict(num_fragments=2, sync_every=4, overlap_steps=-1), "overlap_steps"),
    ],
)
def test_invalid_arguments_raise(kwargs, field):
    with pytest.raises(ValueError, match=field):
        FragmentSchedule(**kwargs)


@pytest.mark.parametrize("fragment", [-1, 3, 10])
def test_offset_of_unknown_fragment_raises(fragment):
    s = FragmentSchedule(num_fragments=3, sync_every=6, overlap_steps=1)
    with pytest.raises(ValueError, match="out of range"):
        s.offset(fragment)
