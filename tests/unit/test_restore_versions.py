"""Invariant ``restore-versions`` (docs/security.md) over generated histories: a syncer merges, checkpoints when the
core says so, crashes or shuts down, and restarts (told to start fresh when no checkpoint is intact, as an operator
would), while someone who can write the run directory but not read the secret breaks its newest checkpoints
(bytes flipped, cut short, replaced by an older genuine one, an array altered under the old digest) or plants
files under any checkpoint name. After every restart each fragment's version is above every version served
before it.

The syncer here is the real one's restore path (:mod:`trainer.restore`), its real checkpoint files and rotation
(:func:`trainer.checkpoint.save_checkpoint`) and its real merge driver (:func:`trainer.core.syncer_driver.tick`)
around the pure state; only the gRPC shell is left out. Deleting the newest genuine checkpoints is the documented
limit (nothing in the directory alone shows a file that is gone) and is not drawn.

And where nobody touched the newest checkpoint the syncer wrote, the restart serves exactly that one.

What this property found (each fixed, each kept as an explicit example): after ``--start-fresh`` over broken
checkpoints, checkpoints were named by merges from 0 again, below the broken ones, and the rotation (by name alone)
deleted each as it was written; a restore's skip moved versions past the checkpoint's name, so the next fresh
start (newest name + an interval) began below versions already served; one interval per unreadable newer
checkpoint fell short once one of them was a restore's own first checkpoint (named past a skip). Now a checkpoint
is named by the highest of its merges and versions (``trainer.checkpoint.checkpoint_number``), the rotation
deletes only below the one written, and the skip reaches past the newest unreadable name
(``restore_version_skip``).

Negative controls: the rotation by name alone, and the skip past the unreadable ones ignored.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support import syncer_policy
from trainer import checkpoint, restore
from trainer.checkpoint import KEEP, NoIntactCheckpoint, list_checkpoints, save_checkpoint
from trainer.core.credentials import checkpoint_key
from trainer.core.fragments import partition_tensors
from trainer.core.syncer_driver import Merged, tick
from trainer.core.syncer_records import Contribution

KEY = checkpoint_key("the run's secret")
HASH = "cfg-hash"
EVERY = 2  # checkpoint interval (merges): small, so that histories of a few dozen steps cross many
SIZES = {"a": 3, "b": 2}
POLICY = syncer_policy(
    2, num_learners=1, min_quorum=1, rounds="arrival", checkpoint_every_merges=EVERY, max_staleness=0
)
FRAGMENTS = partition_tensors(SIZES, 2)


def name(merges: int) -> str:
    return f"ckpt-{merges:010d}.npz"


class Syncer:
    """The syncer process: its state lives on only through the checkpoints it writes."""

    def __init__(self, d, start_fresh: bool, starts: int) -> None:  # noqa: ANN001
        init = {n: np.zeros(s, np.float32) for n, s in SIZES.items()}
        r = restore.restore(POLICY, FRAGMENTS, init, d, KEY, HASH, start_fresh)
        self.d, self.state, self.now, self.inc = d, r.state, 1000.0 * starts, f"inc-{starts}"
        self.restored = r.path
        written = self.save()  # as the real syncer: a checkpoint at start, then the skipped ones set aside
        restore.set_aside(d, r.refused, written, self.inc)
        self.state.join("a", self.inc, now=self.now)
        self.state.report("a", self.inc, 3, 300, 0.1, now=self.now)

    def save(self):  # noqa: ANN201
        arrays, meta = self.state.to_checkpoint()
        meta["config_hash"] = HASH
        self.written = save_checkpoint(self.d, arrays, meta, key=KEY)
        return self.written

    def merge(self, fragment: int) -> None:
        self.now += 1.0
        t = {n: np.full(self.state.params[n].shape, 0.01, np.float32) for n in FRAGMENTS[fragment].names}
        base = self.state.versions[fragment]
        self.state.submit(Contribution("a", self.inc, fragment, base, t, 1, 64, 0.0), now=self.now)
        for a in tick(self.state, self.now, eval_every=10**9, result_fixed=False):
            if isinstance(a, Merged) and a.checkpoint:
                self.save()


def break_file(path, how: str, d) -> None:  # noqa: ANN001
    """Make ``path`` not intact as someone without the secret can."""
    genuine = [p for p in list_checkpoints(d) if p != path]
    if how == "flip" and path.exists():
        blob = bytearray(path.read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        path.write_bytes(bytes(blob))
    elif how == "truncate" and path.exists():
        path.write_bytes(path.read_bytes()[:100])
    elif how == "copy" and genuine:  # another checkpoint under this name (genuine, but not taken at these merges)
        path.write_bytes(genuine[0].read_bytes())
    elif how == "alter" and path.exists():  # one value changed, the digest kept
        try:
            with np.load(path) as z:
                held = {k: z[k] for k in z.files}
        except Exception:  # noqa: BLE001 - broken before: nothing left to alter
            return
        held["param/a"] = held["param/a"] + 1
        with open(path, "wb") as f:
            np.savez(f, **held)
    else:  # junk, or a name with no file behind it yet
        path.write_bytes(b"not a checkpoint")


HOW = st.sampled_from(["flip", "truncate", "copy", "alter", "junk"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("merge"), st.integers(0, 1)),
        st.tuples(st.just("crash")),
        st.tuples(st.just("shutdown")),
        st.tuples(st.just("break"), st.integers(1, KEEP), HOW),  # the newest k checkpoints
        st.tuples(st.just("plant"), st.integers(0, 100), HOW),  # a file under any checkpoint name
    ),
    min_size=1,
    max_size=40,
)
# Files planted above the names the syncer writes made the old rotation (by name alone) delete each checkpoint as
# it was written: after a crash none was intact, and the run's state was lost though nobody touched its newest.
PLANTED_ABOVE = [
    ("plant", 30, "junk"),
    ("plant", 31, "junk"),
    ("plant", 32, "junk"),
    ("crash",),
    *[("plant", k, "junk") for k in (60, 61, 62)],
    *[("merge", 0)] * 6,
    ("crash",),
]
# Merges lost past an unreadable newest checkpoint: the skip must count it.
UNREADABLE_NEWEST = [*[("merge", 0)] * 5, ("break", 1, "flip"), ("crash",)]


def run(d, ops) -> list[str]:  # noqa: ANN001
    """Carry out ``ops``; returns each restart whose versions were not above every version served before it, or
    that did not serve the newest checkpoint the syncer wrote where nobody touched it."""
    starts = 0
    proc = Syncer(d, start_fresh=False, starts=starts)
    served = list(proc.state.versions)
    touched: set[str] = set()  # names broken or planted since the syncer last wrote them
    bad = []
    for op in ops:
        kind = op[0]
        if kind == "merge":
            before = proc.written
            proc.merge(op[1])
            if proc.written is not before:  # it checkpointed: that name is the syncer's own again
                touched.discard(proc.written.name)
        elif kind == "break":
            for path in list_checkpoints(d)[-op[1] :]:
                break_file(path, op[2], d)
                touched.add(path.name)
        elif kind == "plant":
            break_file(d / name(op[1]), op[2], d)
            touched.add(name(op[1]))
        else:
            if kind == "shutdown":
                proc.save()
                touched.discard(proc.written.name)
            newest = None if proc.written.name in touched else proc.written.name
            starts += 1
            try:
                proc = Syncer(d, start_fresh=False, starts=starts)
            except NoIntactCheckpoint:  # the operator's way on: --start-fresh
                proc = Syncer(d, start_fresh=True, starts=starts)
            touched.discard(proc.written.name)
            now = proc.state.versions
            if any(v <= s for v, s in zip(now, served, strict=True)):
                bad.append(f"restart {starts} after {op}: versions {now}, served up to {served}")
            if newest is not None and (proc.restored is None or proc.restored.name != newest):
                bad.append(f"restart {starts} after {op}: restored {proc.restored}, the newest written {newest}")
        served = [max(s, v) for s, v in zip(served, proc.state.versions, strict=True)]
    return bad


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
@example(ops=PLANTED_ABOVE)
@example(ops=UNREADABLE_NEWEST)
def test_every_restart_serves_versions_above_every_one_served_before(tmp_path_factory, ops) -> None:
    assert run(tmp_path_factory.mktemp("ckpt"), ops) == []


def _old_rotate(directory, written):  # noqa: ANN001, ANN202
    gone = list_checkpoints(directory)[:-KEEP]
    for old in gone:
        old.unlink(missing_ok=True)
    return gone


@pytest.mark.parametrize(
    ("mutant", "ops"),
    [
        ((checkpoint, "rotate", _old_rotate), PLANTED_ABOVE),
        ((restore, "restore_version_skip", lambda every, *_: every), UNREADABLE_NEWEST),
    ],
    ids=["rotation-by-name", "skip-past-the-unreadable-ignored"],
)
def test_restore_versions_negative_control(tmp_path, monkeypatch, mutant, ops) -> None:
    assert run(tmp_path / "defended", ops) == []
    monkeypatch.setattr(*mutant)
    assert run(tmp_path / "undefended", ops) != []
