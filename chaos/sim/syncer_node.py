"""The simulated syncer: :class:`~trainer.core.syncer_state.SyncerState` driven by the event loop exactly as the
gRPC service drives it — join, upload, report, long-polling downloads, the driver's merges at its next wake-up
(:mod:`trainer.core.syncer_driver`), checkpoints, evals, crash and restore. Only time is virtual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from chaos.sim.clock import Timer
from chaos.sim.host import SMALL_MESSAGE, Respond, SimHost
from trainer import events as ev
from trainer.audit_log import fragment_digests
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.syncer_driver import EXIT_POLL_S, Merged, MergeRefused, ResultFixed, exit_due, next_wake, tick
from trainer.core.syncer_policy import restore_version_skip
from trainer.core.syncer_records import Contribution, tensor_specs
from trainer.core.syncer_state import SyncerState
from trainer.policy import merge_fields, upload_fields


@dataclass
class _Waiter:
    fragment: int
    want: int
    respond: Respond
    abort: Callable[[], None]


class SyncerNode:
    """The syncer process: up, paused or down; its state survives a crash only through checkpoints."""

    def __init__(self, sim: SimHost) -> None:
        self.sim = sim
        self.state: SyncerState | None = None
        self.up = False
        self.paused = False
        self.starts = 0
        self.incarnation = ""
        self.checkpoint: tuple[dict[str, np.ndarray], dict[str, Any]] | None = None
        self.waiters: list[_Waiter] = []
        self.header_steps: dict[tuple[str, str, int, int, int], float] = {}  # upload key -> clock at its header
        self._merge_timer: Timer | None = None
        self.result_fixed = False
        self.exited = False
        self._stopped_at: float | None = None

    # ---- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        sim, cfg = self.sim, self.sim.cfg
        self.incarnation = f"syncer.{self.starts}"
        self.starts += 1
        if self.checkpoint is None:
            self.state = SyncerState.create(sim.policy, sim.fragments, sim.problem.init_params())
        else:
            arrays, meta = self.checkpoint
            skip = restore_version_skip(
                cfg.syncer.checkpoint_every_merges
            )  # a simulated checkpoint is always readable
            self.state = SyncerState.from_checkpoint(sim.policy, sim.fragments, arrays, meta, version_skip=skip)
            sim.emit(
                "syncer",
                ev.Restore,
                merges_total=self.state.merges_total,
                checkpoint_versions=meta["versions"],
                versions=list(self.state.versions),
                version_skip=skip,
                path="sim",
                digests=fragment_digests(self.state.fragment_digests()),
                state_digest=self.state.state_digest(version_skip=skip),
            )
        self.up, self.paused, self.result_fixed = True, False, False  # a restored run fixes its result again
        self._stopped_at = None
        sim.emit(
            "syncer",
            ev.SyncerStart,
            syncer_incarnation=self.incarnation,
            address="sim",
            config_hash=sim.config_hash,
            versions=list(self.state.versions),
            restored_from_merges=self.state.restored_from_merges,
            pid=0,
            digests=fragment_digests(self.state.fragment_digests()),
        )
        if self.state.checkpoint_due():  # as the real syncer: at start and right after a restore, once started
            self._checkpoint()
        self._eval(final=False)
        self.arm()

    def crash(self) -> None:
        """SIGKILL: everything since the last checkpoint is lost; open long polls break."""
        self.up, self.state = False, None
        self.header_steps = {}
        if self._merge_timer is not None:
            self._merge_timer.cancel()
            self._merge_timer = None
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            w.abort()

    def graceful_stop(self, why: str) -> None:
        if not self.up or self.state is None:
            return
        self._checkpoint()
        self.sim.emit(
            "syncer",
            ev.SyncerStop,
            why=why,
            versions=list(self.state.versions),
            merges_total=self.state.merges_total,
        )
        self.crash()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self.arm()

    @property
    def serving(self) -> bool:
        return self.up and not self.paused and self.state is not None

    # ---- RPC handlers (called when a request arrives) -------------------------------
    def _reject(self, call: str, r: Rejected, learner_id: str = "", fragment: int = -1, base: int = -1) -> None:
        assert self.state is not None
        self.state.rejections[r.reason.value] += 1
        self.sim.emit(
            "syncer",
            ev.Reject,
            call=call,
            reason=r.reason.value,
            detail=r.detail,
            learner_id=learner_id,
            fragment=fragment,
            base_version=base,
        )

    def progress(self) -> float:
        assert self.state is not None
        return self.state.progress()

    def handle_join(self, learner_id: str, incarnation: str, respond: Respond, abort: Callable[[], None]) -> None:
        assert self.state is not None
        try:
            res = self.state.join(learner_id, incarnation, self.sim.loop.now)
        except Rejected as r:
            self._reject("Join", r, learner_id)
            respond((False, r.reason.value, None, 0.0), SMALL_MESSAGE)
            return
        self.sim.emit(
            "syncer",
            ev.Join,
            learner_id=learner_id,
            learner_incarnation=incarnation,
            incarnation_index=res.incarnation_index,
            rejoined=res.rejoined,
        )
        respond((True, "", res, self.progress()), SMALL_MESSAGE)

    def handle_state(self, respond: Respond, abort: Callable[[], None]) -> None:
        assert self.state is not None
        values = [self.state.fragment_value(p) for p in range(len(self.sim.fragments))]
        respond(values, self.sim.problem.real_bytes(list(self.state.params)))

    def handle_leave(
        self, learner_id: str, incarnation: str, why: str, respond: Respond, abort: Callable[[], None]
    ) -> None:
        assert self.state is not None
        try:
            self.state.leave(learner_id, incarnation, self.sim.loop.now)
        except Rejected as r:
            self._reject("Leave", r, learner_id)
            respond(False, SMALL_MESSAGE)
            return
        self.sim.emit("syncer", ev.Leave, learner_id=learner_id, learner_incarnation=incarnation, why=why)
        respond(True, SMALL_MESSAGE)
        self.arm()

    def handle_report(
        self,
        learner_id: str,
        incarnation: str,
        step: int,
        tokens: int,
        step_time_s: float,
        respond: Respond,
        abort: Callable[[], None],
    ) -> None:
        assert self.state is not None
        try:
            stop = self.state.report(learner_id, incarnation, step, tokens, step_time_s, self.sim.loop.now)
        except Rejected as r:
            self._reject("Report", r, learner_id)
            respond((False, False, r.reason.value, 0.0, (0.0, 0.0)), SMALL_MESSAGE)
            return
        respond((True, stop, "", self.progress(), self.state.clock_reading(self.sim.loop.now)), SMALL_MESSAGE)
        self.arm()

    def handle_upload_header(self, c: Contribution) -> None:
        """An upload's header arrived: as the gRPC service, its round now waits (bounded) for the body. A refused
        header changes nothing; the body's arrival answers the refusal, as the service does at the header."""
        st = self.state
        assert st is not None
        self.header_steps[c.key] = st.cluster_step(self.sim.loop.now)
        specs = tensor_specs(c.tensors, st.algorithm.wire_format)
        try:
            st.announce(
                c.learner_id,
                c.incarnation,
                c.fragment,
                c.base_version,
                specs,
                c.c_steps,
                c.c_tokens,
                self.sim.loop.now,
                c.round,
            )
        except Rejected:
            pass

    def handle_upload_piece(self, c: Contribution) -> None:
        """Another piece of an announced upload's body arrived: as the service, its learner is heard."""
        if self.state is not None:
            self.state.hear_body(c.key, self.sim.loop.now)

    def handle_upload_lost(self, c: Contribution) -> None:
        """The call of an announced upload failed before its body came: as the service, stop waiting for it."""
        if self.state is not None:
            self.state.withdraw(c.key)

    def handle_upload(self, c: Contribution, nbytes: int, respond: Respond, abort: Callable[[], None]) -> None:
        st = self.state
        assert st is not None
        header_step = self.header_steps.pop(c.key, 0.0)
        try:
            res = st.submit(c, self.sim.loop.now)
        except Rejected as r:
            self._reject("Upload", r, c.learner_id, c.fragment, c.base_version)
            current = st.versions[c.fragment] if 0 <= c.fragment < len(st.versions) else -1
            respond(
                (False, r.reason.value, current, st.clock_reading(self.sim.loop.now), header_step), SMALL_MESSAGE
            )
            return
        self.sim.emit("syncer", ev.Upload, **upload_fields(c, res, nbytes))
        respond((True, "", res.current_version, st.clock_reading(self.sim.loop.now), header_step), SMALL_MESSAGE)
        self.arm()

    def handle_fragment(self, fragment: int, want: int, respond: Respond, abort: Callable[[], None]) -> None:
        """A long poll: answered when the fragment reaches ``want``, or with what there is after long_poll_s."""
        assert self.state is not None
        if self.state.versions[fragment] >= want:
            self._send_fragment(fragment, respond)
            return
        w = _Waiter(fragment, want, respond, abort)
        self.waiters.append(w)
        self.sim.loop.after(self.sim.cfg.learner.long_poll_s, self._poll_expired, w)

    def _poll_expired(self, w: _Waiter) -> None:
        if w in self.waiters:
            self.waiters.remove(w)
            self._send_fragment(w.fragment, w.respond)

    def _send_fragment(self, fragment: int, respond: Respond) -> None:
        assert self.state is not None
        version, tensors = self.state.fragment_value(fragment)
        respond((version, tensors), self.sim.problem.real_bytes(list(tensors)))

    # ---- the merge loop ---------------------------------------------------------------
    def arm(self) -> None:
        """Set the merge timer to the driver's next wake-up (trainer.core.syncer_driver.next_wake)."""
        if not self.serving:
            return
        assert self.state is not None
        d = next_wake(self.state, self.sim.loop.now, result_fixed=self.result_fixed)
        if d is None:
            return
        if self._merge_timer is not None and not self._merge_timer.cancelled and self._merge_timer.when <= d:
            return
        if self._merge_timer is not None:
            self._merge_timer.cancel()
        self._merge_timer = self.sim.loop.at(d, self._tick)

    def _tick(self) -> None:
        """Carry out what the driver says is due (trainer.core.syncer_driver.tick), as the real syncer's loop does."""
        self._merge_timer = None
        if not self.serving:
            return
        st = self.state
        assert st is not None
        cfg, now = self.sim.cfg, self.sim.loop.now
        for a in tick(st, now, eval_every=cfg.syncer.eval_every_merges, result_fixed=self.result_fixed):
            if isinstance(a, Merged):
                rec = a.record
                audit = self.sim.audit.record(rec.audit, self.incarnation) if rec.audit is not None else None
                self.sim.emit("syncer", ev.Merge, **merge_fields(rec, st.tokens_total, audit))
                if a.checkpoint:
                    self._checkpoint()
                if a.evaluate:
                    self._eval(final=False)
                self._wake(a.fragment)
                self.sim.on_merge(rec.merges_total)
                if not self.serving:  # a fault triggered by this merge count took the syncer down: nothing more
                    return
            elif isinstance(a, MergeRefused):
                self._reject("merge", Rejected(RejectReason.NON_FINITE, a.why), fragment=a.fragment)
            elif isinstance(a, ResultFixed):
                self.result_fixed = True  # the result is fixed at the budget; a settle phase may follow
                self._checkpoint()
                self.sim.emit(
                    "syncer",
                    ev.Finished,
                    tokens_total=st.tokens_total,
                    merges_total=st.merges_total,
                    versions=list(st.versions),
                )
                self._eval(final=True)
            else:
                self.sim.emit(
                    "syncer", ev.Settled, seconds=a.seconds, awaited=list(a.awaited), merges_total=a.merges_total
                )
        if self.result_fixed and st.stopped and self._stopped_at is None:
            self._stopped_at = now
            self.sim.loop.after(EXIT_POLL_S, self._maybe_exit)
        self.arm()

    def _wake(self, fragment: int) -> None:
        assert self.state is not None
        ready = [w for w in self.waiters if w.fragment == fragment and self.state.versions[fragment] >= w.want]
        for w in ready:
            self.waiters.remove(w)
            self._send_fragment(fragment, w.respond)

    def _maybe_exit(self) -> None:
        """As the real syncer: exit when training is over and the driver says so (syncer_driver.exit_due),
        writing a last checkpoint as its shutdown does."""
        if not self.up or self.exited:
            return
        st = self.state
        assert st is not None and self._stopped_at is not None
        if self.paused or not exit_due(st, self.sim.loop.now, self._stopped_at):
            self.sim.loop.after(EXIT_POLL_S, self._maybe_exit)
            return
        self._checkpoint()
        self.sim.emit(
            "syncer", ev.SyncerStop, why="finished", versions=list(st.versions), merges_total=st.merges_total
        )
        self.exited = True
        self.crash()
        self.sim.on_syncer_exit()

    def _checkpoint(self) -> None:
        st = self.state
        assert st is not None
        arrays, meta = st.to_checkpoint()
        self.checkpoint = ({k: np.array(v, copy=True) for k, v in arrays.items()}, dict(meta))
        self.sim.emit(
            "syncer",
            ev.Checkpoint,
            merges_total=st.merges_total,
            versions=list(st.versions),
            path="sim",
            seconds=0.0,
            params_finite=st.params_all_finite(),
            digests=fragment_digests(st.fragment_digests()),
            state_digest=st.state_digest(),
        )

    def _eval(self, final: bool) -> None:
        st = self.state
        assert st is not None
        self.sim.emit(
            "syncer",
            ev.Eval,
            merges_total=st.merges_total,
            versions=list(st.versions),
            loss=self.sim.problem.loss(st.params),
            loss_floor=self.sim.problem.floor,
            tokens_total=st.tokens_total,
            final=final,
        )
