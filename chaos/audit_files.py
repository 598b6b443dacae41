"""A run directory's kept merge audits (``audit/*.npz``, :mod:`trainer.audit_log`), read lazily as a mapping
from file name to arrays: what :class:`chaos.checkers.CheckInput` hands the merge audit."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from chaos.history import History
from trainer import events as ev
from trainer.audit_log import AUDIT_DIR
from trainer.checkpoint import CheckpointError, read_checkpoint
from trainer.config import RunConfig


class AuditFiles(Mapping[str, Mapping[str, np.ndarray]]):
    """``run_dir/audit``'s files; a missing or unreadable one is absent (the checker says how many)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir) / AUDIT_DIR

    def __getitem__(self, name: str) -> Mapping[str, np.ndarray]:
        path = self.dir / name
        if "/" in name or name.startswith(".") or not path.is_file():
            raise KeyError(name)
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError) as err:  # a torn or hand-damaged file: absent, not a crash of the checks
            raise KeyError(name) from err

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(p.name for p in self.dir.glob("*.npz"))) if self.dir.is_dir() else iter(())

    def __len__(self) -> int:
        return sum(1 for _ in self)


def reexecution_inputs(
    cfg: RunConfig, history: History, run_dir: str | Path
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """What the whole-run replay (chaos.checkers.reexecution) starts from and must reach, for a real run that kept every
    merge whole (``syncer.audit_keep_fraction: 1``; else nothing, and the replay says why it did not run): the
    parameters the config initialises the model with (its seed, as every unit derives them), and the arrays of the
    last checkpoint the history names (its path, or the run directory's ``checkpoints/`` of that name).

    >>> reexecution_inputs(RunConfig(), History([], []), "/nonexistent")      # 20% kept by default: no replay
    ({}, {})
    """
    cps = history.of(ev.Checkpoint)
    if cfg.syncer.audit_keep_fraction < 1 or cfg.algorithm.mode == "data-parallel" or not cps:
        return {}, {}
    path = Path(cps[-1].path)
    if not path.is_file():
        path = Path(run_dir) / "checkpoints" / path.name
    try:
        arrays, _ = read_checkpoint(path)  # not verified: the replay compares its contents, key or no key
    except (OSError, CheckpointError):
        return {}, {}
    from trainer.training import TrainingSetup  # JAX: only for a run that can be replayed

    return TrainingSetup.from_config(cfg).init_params(), dict(arrays)
