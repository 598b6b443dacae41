"""A run directory's kept merge audits (``audit/*.npz``, :mod:`trainer.audit_log`), read lazily as a mapping
from file name to arrays: what :class:`chaos.checkers.CheckInput` hands the merge audit."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from trainer.audit_log import AUDIT_DIR


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
