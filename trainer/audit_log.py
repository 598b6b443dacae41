"""Keeping merge audits: every merge digested, a seeded sample kept whole under the run directory's ``audit/``.

A kept merge is one ``.npz`` file of :meth:`trainer.core.audit.MergeAudit.arrays`, named by fragment, version and
the syncer's incarnation (unique even if versions ever went backwards, which the durability check would flag).
Which merges are kept is a pure function of (seed, fragment, version), so a replay keeps the same ones.
Deterministic mode keeps its files in memory (``run_dir`` None) and writes them with the rest of its run directory.
The kept files hold at most ``keep_bytes`` (those already there when a restarted syncer starts count): a merge
sampled past it is only digested, so no run fills a disk with audit (docs/security.md, ``output``).

    >>> import numpy as np
    >>> w = AuditWriter(None, keep_fraction=0.5, seed=0)
    >>> [kept(0.5, 0, 0, v) for v in range(6)] == [kept(0.5, 0, 0, v) for v in range(6)]
    True
    >>> kept(1.0, 0, 3, 7), kept(0.0, 0, 3, 7)
    (True, False)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from trainer import events as ev
from trainer.core.audit import MergeAudit

AUDIT_DIR = "audit"
NPZ_OVERHEAD = 1024  # bytes an array adds to an .npz beside its data, at most (zip headers, .npy header, its name)


def kept(keep_fraction: float, seed: int, fragment: int, version: int) -> bool:
    """Whether the merge making ``version`` of ``fragment`` is kept whole (a seeded, replayable sample)."""
    if keep_fraction >= 1:
        return True
    if keep_fraction <= 0:
        return False
    h = hashlib.sha256(f"{seed}/{fragment}/{version}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < keep_fraction


class AuditWriter:
    """Digests every merge; keeps the sampled ones as files (``run_dir``) or in :attr:`files` (``run_dir`` None)."""

    def __init__(
        self, run_dir: Path | None, keep_fraction: float, seed: int, keep_bytes: int | None = None
    ) -> None:
        self.dir = None if run_dir is None else Path(run_dir) / AUDIT_DIR
        self.keep_fraction, self.seed, self.keep_bytes = keep_fraction, seed, keep_bytes
        self.files: dict[str, dict[str, np.ndarray]] = {}
        on_disk = self.dir.glob("*.npz") if self.dir is not None and self.dir.is_dir() else ()
        self.kept_bytes = sum(p.stat().st_size for p in on_disk)

    def record(self, audit: MergeAudit, syncer_incarnation: str) -> ev.MergeDigests:
        name = ""
        arrays = audit.arrays() if kept(self.keep_fraction, self.seed, audit.fragment, audit.version) else {}
        size = sum(a.nbytes + NPZ_OVERHEAD for a in arrays.values())  # at least the file's size
        if arrays and (self.keep_bytes is None or self.kept_bytes + size <= self.keep_bytes):
            self.kept_bytes += size
            name = f"f{audit.fragment}-v{audit.version}-{syncer_incarnation}.npz"
            if self.dir is None:
                self.files[name] = {n: np.array(a, copy=True) for n, a in arrays.items()}
            else:
                self.dir.mkdir(parents=True, exist_ok=True)
                tmp = self.dir / f".{name}.tmp"
                with open(tmp, "wb") as f:
                    np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy stub: ** may fill allow_pickle: bool
                os.replace(tmp, self.dir / name)  # a killed syncer leaves a whole file or none
        return ev.MergeDigests(file=name, scale=audit.scale, **audit.digests())

    def write_files(self, run_dir: Path) -> None:
        """Deterministic mode: write the files kept in memory into ``run_dir/audit``."""
        if self.files:
            (Path(run_dir) / AUDIT_DIR).mkdir(parents=True, exist_ok=True)
        for name, arrays in self.files.items():
            with open(Path(run_dir) / AUDIT_DIR / name, "wb") as f:
                np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy stub: ** may fill allow_pickle: bool


def fragment_digests(pairs: list[tuple[str, str]]) -> list[ev.FragmentDigest]:
    """:meth:`trainer.core.syncer_state.SyncerState.fragment_digests` as event fields."""
    return [ev.FragmentDigest(params=p, opt=o) for p, o in pairs]
