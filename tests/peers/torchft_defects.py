"""Planted defects in a torchft replica group (test machinery: nothing under peers/, chaos/ or trainer/ names them).

    python -m tests.peers.torchft_defects --defect skips_healing <peers.torchft.train's arguments>

- ``skips_healing``: a group that joins behind the others does not load the state a peer sent it (torchft's Manager
  drops the pending state dict) and trains on from its own stale parameters at the quorum's step.
- ``commits_ignored``: a group whose fragment syncs commit but which keeps its own parameters: after each committed
  outer step it puts back what it held before the sync.

Each must be caught by a check (tests/peers/test_torchft.py): the group's committed versions are not the others'.
"""

from __future__ import annotations

import sys
from typing import Any

DEFECTS = ("skips_healing", "commits_ignored")


def plant(defect: str) -> None:
    import torch
    from torchft import local_sgd, manager

    if defect == "skips_healing":

        def apply_pending(self: Any) -> None:
            self._quorum_future.result()
            self._pending_state_dict = None  # BUG: the peer's state is dropped, not loaded

        manager.Manager._apply_pending_state_dict = apply_pending
    elif defect == "commits_ignored":
        sync = local_sgd._StreamingDiLoCoFragment.perform_sync

        def perform_sync(self: Any) -> bool:
            held = [p.detach().clone() for p in self._model_fragment.parameters()]
            committed = sync(self)
            with torch.no_grad():
                for p, h in zip(self._model_fragment.parameters(), held):
                    p.copy_(h)  # BUG: the committed outer step is dropped: the group trains on from its own
            return committed

        local_sgd._StreamingDiLoCoFragment.perform_sync = perform_sync
    else:
        raise SystemExit(f"--defect {defect!r}: one of {DEFECTS}")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--defect":
        raise SystemExit("usage: python -m tests.peers.torchft_defects --defect NAME <train.py's arguments>")
    plant(argv[1])
    from peers.torchft import train

    return train.main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
