"""Unit tests for trainer.core.fragments (balanced tensor fragmentation)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.core.fragments import Fragment, FragmentationError, imbalance, partition_tensors

SETTINGS = settings(max_examples=80, deadline=None)

_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.0123456789", min_size=1, max_size=8)
_sizes = st.dictionaries(_names, st.integers(min_value=0, max_value=10_000), min_size=1, max_size=30)


@st.composite
def sizes_and_p(draw):
    sizes = draw(_sizes)
    p = draw(st.integers(min_value=1, max_value=len(sizes)))
    return sizes, p


@SETTINGS
@given(sizes_and_p())
def test_partition_covers_every_tensor_exactly_once(case):
    sizes, p = case
    frags = partition_tensors(sizes, p)
    all_names = [n for f in frags for n in f.names]
    assert sorted(all_names) == sorted(sizes)  # every tensor, none twice
    assert len(all_names) == len(set(all_names))
    assert [f.index for f in frags] == list(range(p))
    for f in frags:
        assert f.names, "every fragment holds at least one whole tensor"
        assert list(f.names) == sorted(f.names)
        assert f.size == sum(sizes[n] for n in f.names)


@SETTINGS
@given(sizes_and_p(), st.randoms(use_true_random=False))
def test_partition_is_deterministic_and_independent_of_dict_order(case, rnd):
    sizes, p = case
    items = list(sizes.items())
    rnd.shuffle(items)
    assert partition_tensors(sizes, p) == partition_tensors(sizes, p)
    assert partition_tensors(dict(items), p) == partition_tensors(sizes, p)


@SETTINGS
@given(sizes_and_p())
def test_partition_satisfies_greedy_lpt_bound(case):
    sizes, p = case
    frags = partition_tensors(sizes, p)
    mean = sum(sizes.values()) / p
    assert max(f.size for f in frags) <= mean + max(sizes.values())


@pytest.mark.parametrize("p,per_fragment", [(1, 7), (4, 6), (5, 3), (24, 2)])
def test_equal_size_tensors_balance_perfectly(p, per_fragment):
    sizes = {f"t{i:03d}": 128 for i in range(p * per_fragment)}
    frags = partition_tensors(sizes, p)
    assert imbalance(frags) == 1.0
    assert {f.size for f in frags} == {128 * per_fragment}


def test_docstring_example():
    frags = partition_tensors({"a": 6, "b": 5, "c": 4, "d": 3}, 2)
    assert [f.names for f in frags] == [("a", "d"), ("b", "c")]
    assert [f.size for f in frags] == [9, 9]


def test_imbalance_is_max_over_mean():
    frags = (Fragment(0, ("a",), 30), Fragment(1, ("b",), 10))
    assert imbalance(frags) == pytest.approx(1.5)
    assert imbalance((Fragment(0, ("a",), 0),)) == 1.0  # empty tensors: no division by zero


def test_one_fragment_holds_everything():
    sizes = {"a": 3, "b": 9, "c": 1}
    (only,) = partition_tensors(sizes, 1)
    assert only.names == ("a", "b", "c")
    assert only.size == 13


def test_ties_are_broken_by_name_then_fragment_index():
    sizes = {name: 5 for name in ["d", "b", "a", "c"]}
    items = list(sizes.items())
    random.Random(0).shuffle(items)
    frags = partition_tensors(dict(items), 2)
    assert [f.names for f in frags] == [("a", "c"), ("b", "d")]


@pytest.mark.parametrize("p", [0, -1, -10])
def test_fewer_than_one_fragment_is_refused(p):
    with pytest.raises(FragmentationError, match=r"num_fragments must be >= 1"):
        partition_tensors({"a": 1, "b": 2}, p)


def test_more_fragments_than_tensors_is_refused_with_advice():
    with pytest.raises(FragmentationError) as info:
        partition_tensors({"a": 1, "b": 2, "c": 3}, 4)
    msg = str(info.value)
    assert "num_fragments=4" in msg
    assert "3" in msg  # the number of tensors
    assert "lower num_fragments" in msg  # says what to do


def test_fragmentation_error_is_a_value_error():
    assert issubclass(FragmentationError, ValueError)


def test_zero_size_tensors_still_give_every_fragment_a_tensor():
    # Found by the property above: two empty tensors both went to fragment 0 (its load stayed 0).
    frags = partition_tensors({"0": 0, "00": 0}, 2)
    assert [f.names for f in frags] == [("0",), ("00",)]
