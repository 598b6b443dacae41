"""What a (re)starting syncer serves: the newest intact checkpoint, every version moved past what may have been
served since (docs/security.md, ``restore-integrity`` and ``restore-versions``), or — told to start fresh — a
fresh state whose versions start above every checkpoint's name.

The checkpoints the restore skipped (newer than the one restored and not intact, or all of them on a fresh start)
still count once: their number sets the skip. Once the restored state's own first checkpoint is written, which
holds the skipped-over versions, they are moved into ``checkpoints/refused/`` (:func:`set_aside`): kept for the
operator, out of the next restore's count and out of the rotation's way.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainer.checkpoint import NoIntactCheckpoint, list_checkpoints, load_latest, number_of
from trainer.core.checkpoint_codec import encode_arrays, restore_problems
from trainer.core.fragments import Fragment
from trainer.core.syncer_policy import SyncerPolicy, restore_version_skip
from trainer.core.syncer_state import SyncerState
from trainer.errors import ConfigError

REFUSED_DIR = "refused"  # under the checkpoint directory: checkpoints a restore skipped, kept for the operator


@dataclass(frozen=True)
class Restored:
    """A starting syncer's state. ``path``: the checkpoint restored (None: a fresh state); ``skip``: how far its
    versions were moved (restored: past the checkpoint's; fresh: the version every fragment starts at);
    ``refused``: the checkpoints skipped as not intact; ``meta``: the restored checkpoint's metadata."""

    state: SyncerState
    path: Path | None
    skip: int
    refused: tuple[Path, ...]
    meta: dict[str, Any] | None = None


def restore(
    policy: SyncerPolicy,
    fragments: tuple[Fragment, ...],
    init: dict[str, np.ndarray],
    ckpt_dir: Path,
    key: bytes | None,
    config_hash: str,
    start_fresh: bool = False,
) -> Restored:
    """The state to serve from ``ckpt_dir``: raises :class:`NoIntactCheckpoint` where there are checkpoints and none
    is intact, unless ``start_fresh``; :class:`ConfigError` where the intact one was written by another config."""
    state = SyncerState.create(policy, fragments, init)
    expected = encode_arrays(state.params, state.opt_states)
    found = list_checkpoints(ckpt_dir)
    every = policy.checkpoint_every_merges
    try:
        loaded = load_latest(
            ckpt_dir, key=key, verify=True, check=lambda arrays: restore_problems(arrays, expected)
        )
    except NoIntactCheckpoint as err:
        if not start_fresh:
            raise
        # Versions start above every version the broken checkpoints' syncer can have served.
        skip = max(number_of(p) for p in found) + restore_version_skip(every)
        state.start_at_version(skip)
        print(f"warning: --start-fresh: {err}\nstarting from scratch at version {skip}", file=sys.stderr)
        return Restored(state, None, skip, tuple(found))
    if loaded is None:
        return Restored(state, None, 0, ())
    arrays, meta, path = loaded
    if meta.get("config_hash") not in (None, config_hash):
        raise ConfigError(
            f"{path}: checkpoint was written by config {meta.get('config_hash')}, "
            f"this run's is {config_hash}; use a fresh run directory"
        )
    refused = tuple(p for p in found if p.name > path.name)
    newest = max((number_of(p) for p in refused), default=None)
    skip = restore_version_skip(every, meta["versions"], newest)
    return Restored(
        SyncerState.from_checkpoint(policy, fragments, arrays, meta, version_skip=skip), path, skip, refused, meta
    )


def set_aside(ckpt_dir: Path, refused: tuple[Path, ...], written: Path, tag: str) -> list[Path]:
    """Move the checkpoints a restore skipped into ``ckpt_dir/refused/`` (names suffixed with ``tag``, the starting
    syncer's incarnation); call it only once ``written``, a checkpoint holding the restored versions, is (a skipped
    one of the same name was replaced by it and stays). Returns where they went; one that cannot be moved stays
    (it only makes the next restore skip further)."""
    moved = []
    for p in refused:
        if p.name == written.name:
            continue
        dest = ckpt_dir / REFUSED_DIR / f"{p.name}.{tag}"
        try:
            dest.parent.mkdir(exist_ok=True)
            p.replace(dest)
        except OSError as err:
            print(f"warning: could not set {p} aside ({err}); the next restore counts it again", file=sys.stderr)
            continue
        moved.append(dest)
    return moved
