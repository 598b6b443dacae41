"""Atomic syncer checkpoints: one ``.npz`` per checkpoint, written to a temporary file, fsynced, renamed.

A checkpoint holds named arrays and a JSON metadata blob (stored as a uint8
array, so loading never needs pickle). The newest readable checkpoint wins; a
torn or corrupt file (a crash mid-write can't produce one, but a disk can) is
skipped with a warning rather than crashing the restart.

Example:
    >>> import numpy as np, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = save_checkpoint(d, 5, {"param/w": np.ones(2, np.float32)}, {"versions": [1]})
    >>> arrays, meta, path = load_latest(d)
    >>> meta["versions"], arrays["param/w"].tolist()
    ([1], [1.0, 1.0])
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import zipfile
from collections.abc import Mapping
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


def save_checkpoint(
    directory: str | Path, merges: int, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]
) -> Path:
    """Write ``ckpt-<merges>.npz`` atomically; keep the newest few. Returns its path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if "__meta__" in arrays:
        raise CheckpointError("array name '__meta__' is reserved")
    buf = io.BytesIO()
    blob = np.frombuffer(json.dumps(dict(meta), sort_keys=True).encode(), dtype=np.uint8)
    named = {k: np.asarray(v) for k, v in arrays.items()}
    np.savez(buf, __meta__=blob, **named)  # type: ignore[arg-type]  # numpy stub: ** may fill allow_pickle: bool
    final = d / f"ckpt-{merges:010d}.npz"
    tmp = d / f".{final.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(buf.getbuffer())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    _fsync_dir(d)
    for old in list_checkpoints(d)[:-KEEP]:
        old.unlink(missing_ok=True)
    return final


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


def list_checkpoints(directory: str | Path) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if _NAME.match(p.name))


def read_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Arrays and metadata of one checkpoint; any corruption raises :class:`CheckpointError`."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        if "__meta__" not in arrays:
            raise CheckpointError(f"{path}: no metadata; not a diloco-chaos checkpoint")
        meta = json.loads(arrays.pop("__meta__").tobytes().decode())
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # JSON/Unicode errors are ValueErrors
        raise CheckpointError(f"{path}: unreadable checkpoint: {err}") from None
    return arrays, meta


def load_latest(directory: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any], Path] | None:
    """The newest readable checkpoint in ``directory``, or None if there is none."""
    for path in reversed(list_checkpoints(directory)):
        try:
            arrays, meta = read_checkpoint(path)
        except CheckpointError as err:
            print(f"warning: skipping {err}", file=sys.stderr)
            continue
        return arrays, meta, path
    return None
