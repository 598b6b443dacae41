"""Refusals the syncer folds (trainer.core.repeats) are in its history when the run's result is fixed, not only
when the process exits: on Kubernetes the syncer keeps running after it (--no-exit-on-finish) and `collect` reads
the history then. Found on the real cluster: random-mix's ledger FAILED ("learner-1 was told 'late_round' ...; the
syncer recorded no such refusal") with every refusal folded past the burst missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer import events as ev
from trainer.config import RunConfig
from trainer.core.reasons import RejectReason
from trainer.syncer import LEARNER_LOG_BURST, OUTSIDER_LOG_S, SyncerService

pytestmark = pytest.mark.integration


def test_folded_refusals_are_logged_with_the_result(tmp_path: Path) -> None:
    svc = SyncerService(RunConfig.model_validate({}), tmp_path, exit_on_finish=False)
    told = LEARNER_LOG_BURST + 7
    try:
        for _ in range(told):
            svc.record_reject("Upload", RejectReason.LATE_ROUND, "its round has merged", "learner-1", 0, 3)
        with svc.cond:
            svc._finalize_locked()
        history = list(ev.read_events(tmp_path / "events" / "syncer.jsonl"))
        finished = next(i for i, e in enumerate(history) if isinstance(e, ev.Finished))
        rejects = [e for e in history[:finished] if isinstance(e, ev.Reject) and e.learner_id == "learner-1"]
        assert sum(e.refusals for e in rejects) == told  # every refusal the learner was told of, before `finished`
        assert len(rejects) == LEARNER_LOG_BURST + 1  # the burst, then one event carrying the folded rest
        # The one that filled the burst says the next are folded for the rest of the window (the ledger reads it
        # when a SIGKILL loses the folded count); those before it do not
        burst = rejects[:LEARNER_LOG_BURST]
        assert all(e.folds_for_s == 0 for e in burst[:-1]), burst
        assert 0 < burst[-1].folds_for_s <= OUTSIDER_LOG_S, burst[-1]
    finally:
        svc.shutdown("test over")
    after = [e for e in ev.read_events(tmp_path / "events" / "syncer.jsonl") if isinstance(e, ev.Reject)]
    assert sum(e.refusals for e in after) == told  # shutdown logs nothing twice
