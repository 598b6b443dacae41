"""Atomic syncer checkpoints: one ``.npz`` per checkpoint, written to a temporary file, fsynced, renamed.

A checkpoint holds named arrays and a JSON metadata blob (stored as a uint8
array, so loading never needs pickle). The metadata carries a digest of both
(HMAC-SHA256 under a key derived from the run's secret, or SHA-256 where the run
has none): a restore serves only a checkpoint whose digest matches
(docs/security.md, ``restore-integrity``). The newest intact checkpoint wins; a
torn, altered or forged one (a crash mid-write can't produce one, but a disk or
someone who can write the run directory can) is skipped with a warning. With
checkpoints present and none intact, :func:`load_latest` raises, naming each
file and what is wrong with it: a restart must not start from scratch silently.

Example:
    >>> import numpy as np, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = save_checkpoint(d, {"param/w": np.ones(2, np.float32)}, {"merges_total": 5, "versions": [1]})
    >>> arrays, meta, path = load_latest(d)
    >>> meta["versions"], arrays["param/w"].tolist()
    ([1], [1.0, 1.0])
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import re
import sys
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from trainer.errors import CheckpointError

_NAME = re.compile(r"^ckpt-(\d{10})\.npz$")
KEEP = 3


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


DIGEST = "digest"  # the metadata field holding the checkpoint's digest


def checkpoint_digest(arrays: Mapping[str, np.ndarray], meta_json: str, key: bytes | None) -> dict[str, str]:
    """The digest of a checkpoint's arrays (names, dtypes, shapes, bytes) and its metadata's JSON text.

    >>> a = {"w": np.ones(2, np.float32)}
    >>> d = checkpoint_digest(a, "{}", None)
    >>> d["algorithm"], d == checkpoint_digest({"w": np.ones(2, np.float64)}, "{}", None)
    ('sha256', False)
    >>> checkpoint_digest(a, "{}", b"k")["algorithm"]
    'hmac-sha256'
    """
    h = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        h.update(a.tobytes() if a.ndim == 0 else a.data)
    h.update(meta_json.encode())
    return {"algorithm": "sha256" if key is None else "hmac-sha256", "hex": h.hexdigest()}


def save_checkpoint(
    directory: str | Path,
    arrays: Mapping[str, np.ndarray],
    meta: Mapping[str, Any],
    key: bytes | None = None,
) -> Path:
    """Write ``ckpt-<number>.npz`` (:func:`checkpoint_number` of ``meta``) atomically, its digest under ``key``
    (None: SHA-256) in its metadata; keep the newest few. Returns its path."""
    if "__meta__" in arrays:
        raise CheckpointError("array name '__meta__' is reserved")
    if DIGEST in meta:
        raise CheckpointError(f"metadata field {DIGEST!r} is reserved")
    number = checkpoint_number(meta)
    if number is None:
        raise CheckpointError("a checkpoint's metadata needs merges_total or versions: its name is made of them")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    named = {k: np.asarray(v) for k, v in arrays.items()}
    plain = json.loads(_meta_json(meta))  # as a reader will see it (tuples as lists, keys as strings)
    signed = _meta_json({**plain, DIGEST: checkpoint_digest(named, _meta_json(plain), key)})
    blob = np.frombuffer(signed.encode(), dtype=np.uint8)
    np.savez(buf, __meta__=blob, **named)  # type: ignore[arg-type]  # numpy stub: ** may fill allow_pickle: bool
    final = d / f"ckpt-{number:010d}.npz"
    tmp = d / f".{final.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(buf.getbuffer())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    _fsync_dir(d)
    rotate(d, final)
    return final


def rotate(directory: Path, written: Path) -> list[Path]:
    """Delete all but the ``KEEP - 1`` newest checkpoints named below ``written``, the one just written; returns
    those deleted. Files named above it are not this run's past (unreadable ones a restore skipped, or planted):
    deleting by name alone deleted the run's own new checkpoints while they were there."""
    older = [p for p in list_checkpoints(directory) if p.name < written.name]
    gone = older[: max(len(older) - (KEEP - 1), 0)]
    for old in gone:
        old.unlink(missing_ok=True)
    return gone


RESULT_NAME = "result.npz"  # the checkpoint at the token budget; rotation and restore leave it alone


def result_checkpoint(directory: str | Path) -> Path | None:
    """The run's result: the checkpoint taken at the token budget, else the newest (a run cut short).

    A settle phase (syncer.settle_s) merges on after the budget; those checkpoints are not the result.
    """
    d = Path(directory)
    if (d / RESULT_NAME).is_file():
        return d / RESULT_NAME
    ckpts = list_checkpoints(d)
    return ckpts[-1] if ckpts else None


def checkpoint_number(meta: Mapping[str, Any]) -> int | None:
    """The number a checkpoint is named by: the merges it was taken at, or its highest version where a restore or a
    fresh start moved the versions past that (None: the metadata has neither). Either way no version its syncer
    had served when it was written is above it, so a start above the newest name plus what one interval can merge
    is above them all (docs/security.md, ``restore-versions``).

    >>> checkpoint_number({"merges_total": 40, "versions": [12, 28]}), checkpoint_number({"merges_total": 40, "versions": [80, 61]})
    (40, 80)
    """
    merges, versions = meta.get("merges_total"), meta.get("versions")
    numbers = [merges] if isinstance(merges, int) else []
    if isinstance(versions, list):
        numbers += [v for v in versions if isinstance(v, int)]
    return max(numbers) if numbers else None


def number_of(path: Path) -> int:
    """The number a checkpoint is named by (:func:`checkpoint_number`).

    >>> number_of(Path("ckpt-0000000040.npz"))
    40
    """
    m = _NAME.match(path.name)
    if m is None:
        raise CheckpointError(f"{path}: not a checkpoint's name (ckpt-<number>.npz)")
    return int(m.group(1))


def list_checkpoints(directory: str | Path) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if _NAME.match(p.name))


def read_checkpoint(
    path: str | Path, key: bytes | None = None, verify: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Arrays and metadata (without its digest) of one checkpoint; any corruption raises :class:`CheckpointError`.

    ``verify`` (a restore): the digest must be there, of the kind ``key`` gives (HMAC under it, SHA-256 without),
    and match. Otherwise a SHA-256 digest is checked where there is one (anyone can), an HMAC one is not (only the
    key's holder can).
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        if "__meta__" not in arrays:
            raise CheckpointError(f"{path}: no metadata; not a diloco-chaos checkpoint")
        meta = json.loads(arrays.pop("__meta__").tobytes().decode())
        if not isinstance(meta, dict):
            raise CheckpointError(f"{path}: its metadata is not a JSON object; not a diloco-chaos checkpoint")
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # JSON/Unicode errors are ValueErrors
        raise CheckpointError(f"{path}: unreadable checkpoint: {err}") from None
    got = meta.pop(DIGEST, None)
    want = "sha256" if key is None else "hmac-sha256"
    if verify or (isinstance(got, dict) and got.get("algorithm") == "sha256"):
        if not isinstance(got, dict) or got.get("algorithm") != want:
            raise CheckpointError(
                f"{path}: no {want} digest (it has {got.get('algorithm') if isinstance(got, dict) else 'none'}): "
                "not written by this run's syncer"
            )
        if not hmac.compare_digest(str(got.get("hex")), checkpoint_digest(arrays, _meta_json(meta), key)["hex"]):
            raise CheckpointError(
                f"{path}: its digest does not match its contents: altered, or forged without the key"
            )
        if (wrong := misnamed(Path(path), meta)) is not None:
            raise CheckpointError(wrong)
    return arrays, meta


def misnamed(path: Path, meta: Mapping[str, Any]) -> str | None:
    """Why a checkpoint's name disagrees with its contents' :func:`checkpoint_number` (None: it agrees, or either is
    unknown). The digest covers the contents, not the name: a genuine checkpoint copied under a newer name would
    be served as new state.

    >>> misnamed(Path("ckpt-0000000040.npz"), {"merges_total": 40, "versions": [40, 3]}) is None
    True
    >>> misnamed(Path("ckpt-0000000090.npz"), {"merges_total": 40})
    'ckpt-0000000090.npz: its name says 90, its contents 40: copied or renamed from another checkpoint'
    """
    named, held = _NAME.match(path.name), checkpoint_number(meta)
    if named is None or held is None or held == int(named.group(1)):
        return None
    return f"{path}: its name says {int(named.group(1))}, its contents {held}: copied or renamed from another checkpoint"


def _meta_json(meta: Mapping[str, Any]) -> str:
    return json.dumps(dict(meta), sort_keys=True)


class NoIntactCheckpoint(CheckpointError):
    """Checkpoints are there but none can be restored; ``problems`` names each file and what is wrong with it."""

    def __init__(self, directory: Path, problems: list[str]) -> None:
        self.directory, self.problems = directory, problems
        super().__init__(
            f"{directory}: no checkpoint can be restored, so the syncer will not start from scratch on its own:\n  "
            + "\n  ".join(problems)
            + "\nMove the run directory's checkpoints aside and pass --start-fresh to train from the beginning (its "
            "versions then start above every checkpoint's), or restore an intact checkpoint into it."
        )


def load_latest(
    directory: str | Path,
    key: bytes | None = None,
    verify: bool = False,
    check: Callable[[dict[str, np.ndarray]], list[str]] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any], Path] | None:
    """The newest intact checkpoint in ``directory`` (it reads, its digest matches when ``verify``, and ``check``
    finds no problem in its arrays), or None where there is no checkpoint at all.

    Raises :class:`NoIntactCheckpoint` where there are checkpoints and none is intact.
    """
    problems = []
    for path in reversed(list_checkpoints(directory)):
        try:
            arrays, meta = read_checkpoint(path, key, verify)
            found = check(arrays) if check is not None else []
            if found:
                raise CheckpointError(f"{path}: " + "; ".join(found))
        except CheckpointError as err:
            print(f"warning: skipping {err}", file=sys.stderr)
            problems.append(str(err))
            continue
        return arrays, meta, path
    if problems:
        raise NoIntactCheckpoint(Path(directory), problems)
    return None
