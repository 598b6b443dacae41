"""Invariant ``restore-integrity`` (docs/security.md) over generated tampering: someone who can write the run
directory but does not hold the run's secret flips bytes, truncates, alters an array and keeps the digest, copies a
genuine checkpoint under a newer name, forges one under another key or none, deletes files — in any order. A
restore then serves a checkpoint exactly as this run's syncer wrote it under that name, or refuses (no intact
checkpoint), never anything else.

Deleting the newest genuine checkpoints is not detectable from the directory alone: the restore then serves an
older genuine one (docs/security.md says what that leaves of ``restore-versions``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.checkpoint import NoIntactCheckpoint, list_checkpoints, load_latest, save_checkpoint
from trainer.core.credentials import checkpoint_key

KEY = checkpoint_key("the run's secret")
GENUINE = (10, 20, 30)


def arrays(k: int) -> dict[str, np.ndarray]:
    return {"param/w": np.full((3, 4), k, np.float32), "opt/0/0": np.arange(5, dtype=np.float32) * k}


def meta(k: int) -> dict:
    return {"versions": [k, k - 1], "merges_total": k, "tokens_by_incarnation": {"a/i": 7 * k}, "finished": False}


def name(k: int) -> str:
    return f"ckpt-{k:010d}.npz"


actions = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.sampled_from(GENUINE), st.integers(0, 10**6), st.integers(0, 255)),
        st.tuples(st.just("truncate"), st.sampled_from(GENUINE), st.integers(0, 10**6)),
        st.tuples(st.just("alter"), st.sampled_from(GENUINE), st.sampled_from(["param/w", "opt/0/0"])),
        st.tuples(st.just("copy"), st.sampled_from(GENUINE), st.integers(31, 99)),
        st.tuples(st.just("forge"), st.integers(31, 99), st.sampled_from(["another key", "no key"])),
        st.tuples(st.just("delete"), st.sampled_from(GENUINE)),
    ),
    min_size=1,
    max_size=6,
)


def tamper(d, action) -> None:  # noqa: ANN001
    kind, *args = action
    if kind in ("flip", "truncate", "alter", "delete", "copy") and not (d / name(args[0])).exists():
        return
    if kind == "flip":
        path, at, value = d / name(args[0]), args[1], args[2]
        blob = bytearray(path.read_bytes())
        if not blob:
            return
        blob[at % len(blob)] = value
        path.write_bytes(bytes(blob))
    elif kind == "truncate":
        path = d / name(args[0])
        blob = path.read_bytes()
        path.write_bytes(blob[: args[1] % max(len(blob), 1)])
    elif kind == "alter":  # one value changed, the digest (in the metadata) kept
        path = d / name(args[0])
        try:
            with np.load(path) as z:
                held = {k: z[k] for k in z.files}
        except Exception:  # noqa: BLE001 - flipped or truncated before: nothing to alter
            return
        if args[1] in held:
            held[args[1]] = held[args[1]] + 1
        with open(path, "wb") as f:
            np.savez(f, **held)
    elif kind == "copy":
        (d / name(args[1])).write_bytes((d / name(args[0])).read_bytes())
    elif kind == "forge":
        other = d / "elsewhere"  # written apart: saving in d would rotate the genuine ones away
        key = checkpoint_key("another secret") if args[1] == "another key" else None
        save_checkpoint(other, arrays(args[0]), meta(args[0]), key=key).rename(d / name(args[0]))
    elif kind == "delete":
        (d / name(args[0])).unlink()


def check_restore(d, tampering) -> None:  # noqa: ANN001
    for k in GENUINE:
        save_checkpoint(d, arrays(k), meta(k), key=KEY)
    for action in tampering:
        tamper(d, action)
    try:
        got = load_latest(d, key=KEY, verify=True)
    except NoIntactCheckpoint:
        return
    if got is None:
        assert not list_checkpoints(d)
        return
    served, served_meta, path = got
    k = int(path.name[5:15])
    assert k in GENUINE, f"served {path.name}, which this run never wrote"
    assert served_meta == meta(k), served_meta
    assert served.keys() == arrays(k).keys() and all(np.array_equal(served[n], v) for n, v in arrays(k).items())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tampering=actions)
def test_a_restore_serves_only_what_this_run_wrote_under_that_name(tmp_path_factory, tampering) -> None:
    check_restore(tmp_path_factory.mktemp("ckpt"), tampering)


def test_restore_integrity_negative_control(tmp_path, monkeypatch) -> None:
    """With the name not bound to the contents, a genuine checkpoint copied under a newer name is served as new."""
    monkeypatch.setattr("trainer.checkpoint.misnamed", lambda path, meta: None)
    with pytest.raises(AssertionError, match="served ckpt-0000000050.npz"):
        check_restore(tmp_path, [("copy", 10, 50)])
