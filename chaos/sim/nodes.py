"""The simulated syncer and learners: the real core state machines, driven by the event loop.

:class:`SyncerNode` wraps :class:`~trainer.core.syncer_state.SyncerState`
exactly as the gRPC service does (join, upload, report, long-polling
downloads, a merge timer at the core's next deadline, checkpoints, evals,
crash and restore). :class:`LearnerNode` wraps
:class:`~trainer.core.learner_book.LearnerBook` and
:func:`~trainer.core.replies.upload_outcome` exactly as the learner process
does (one upload at a time, a long poll per fragment, periodic reports,
rejoin, stop). Only the inner step is a surrogate
(:mod:`chaos.sim.problem`) and only time is virtual.

Every node writes the same events (:mod:`trainer.events`) a real process
writes, stamped with virtual time, so the chaos checkers judge a simulated run
exactly as they judge a real one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from trainer import events as ev
from trainer.audit_log import AuditWriter, fragment_digests
from trainer.core.audit import digest
from trainer.core.corruption import corrupted
from trainer.core.header_lag import HeaderLags
from trainer.core.learner_book import LearnerBook, SyncStart
from trainer.core.reasons import RejectReason, Rejected
from trainer.core.replies import UNREACHABLE, report_outcome, upload_outcome
from trainer.core.rounds import StepClock, sync_step
from trainer.core.fragment_schedule import FragmentSchedule
from trainer.core.step_timer import StepTimes, lookahead_s
from trainer.core.syncer_driver import MergeRefused, Merged, ResultFixed, next_wake, tick
from trainer.core.syncer_state import Contribution, SyncerState, restore_version_skip, tensor_specs
from trainer.policy import merge_fields
from trainer.training import lr_scale

if TYPE_CHECKING:
    from chaos.sim.clock import EventLoop
    from chaos.sim.options import SimOptions
    from chaos.sim.problem import QuadraticProblem
    from trainer.config import RunConfig
    from trainer.core.fragments import Fragment
    from trainer.core.syncer_state import SyncerPolicy

Respond = Callable[[Any, int], None]  # (reply, reply bytes)


class SimHost(Protocol):
    """What the nodes need of the simulation that drives them (:class:`chaos.sim.runner.Simulation`)."""

    cfg: "RunConfig"
    config_hash: str
    opts: "SimOptions"
    loop: "EventLoop"
    rng: "np.random.Generator"
    problem: "QuadraticProblem"
    policy: "SyncerPolicy"
    fragments: "tuple[Fragment, ...]"
    fragment_names: list[list[str]]
    tokens_per_step: int
    syncer: "SyncerNode"
    audit: "AuditWriter"  # every merge digested, its tensors kept in memory

    def emit(self, source: str, kind: type, **fields: Any) -> None:
        """Write one event, stamped with virtual time."""
        ...

    def rpc(self, node: "LearnerNode", req_bytes: int, handler: Callable[..., None], on_reply: Callable[[Any], None],
            on_fail: Callable[[], None], on_header: Callable[[], None] | None = None) -> None:
        """A unary call from a learner to the syncer over its link."""
        ...

    def upload_seconds(self, lid: str, nbytes: int) -> float:
        """How long ``nbytes`` take over the learner's link to the syncer."""
        ...

    def on_merge(self, merges_total: int) -> None:
        """The syncer merged (the fault plan may start an at_merge fault)."""
        ...

    def on_syncer_exit(self) -> None:
        """The syncer finished and exited: the run ends."""
        ...
SMALL_MESSAGE = 200  # bytes of a request or reply without tensors


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
        self._merge_timer = None
        self.finalized = False
        self.exited = False
        self._finished_at: float | None = None

    # ---- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        sim, cfg = self.sim, self.sim.cfg
        self.incarnation = f"syncer.{self.starts}"
        self.starts += 1
        if self.checkpoint is None:
            self.state = SyncerState.create(sim.policy, sim.fragments, sim.problem.init_params())
        else:
            arrays, meta = self.checkpoint
            skip = restore_version_skip(cfg.syncer.checkpoint_every_merges)  # a simulated checkpoint is always readable
            self.state = SyncerState.from_checkpoint(sim.policy, sim.fragments, arrays, meta, version_skip=skip)
            sim.emit("syncer", ev.Restore, merges_total=self.state.merges_total, checkpoint_versions=meta["versions"],
                     versions=list(self.state.versions), version_skip=skip, path="sim",
                     digests=fragment_digests(self.state.fragment_digests()),
                     state_digest=self.state.state_digest(version_skip=skip))
        self.up, self.paused, self.finalized = True, False, False  # a restored finished run finalizes again
        self._finished_at = None
        if self.state.checkpoint_due():  # as the real syncer: at start and right after a restore
            self._checkpoint()
        sim.emit("syncer", ev.SyncerStart, syncer_incarnation=self.incarnation, address="sim",
                 config_hash=sim.config_hash, versions=list(self.state.versions),
                 restored_from_merges=self.state.restored_from_merges, pid=0,
                 digests=fragment_digests(self.state.fragment_digests()))
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
        self.sim.emit("syncer", ev.SyncerStop, why=why, versions=list(self.state.versions),
                      merges_total=self.state.merges_total)
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
        self.sim.emit("syncer", ev.Reject, call=call, reason=r.reason.value, detail=r.detail, learner_id=learner_id,
                      fragment=fragment, base_version=base)

    def progress(self) -> float:
        assert self.state is not None
        budget = self.state.policy.token_budget
        return min(self.state.tokens_total / budget, 1.0) if budget else 0.0

    def handle_join(self, learner_id: str, incarnation: str, respond: Respond, abort: Callable[[], None]) -> None:
        assert self.state is not None
        try:
            res = self.state.join(learner_id, incarnation, self.sim.loop.now)
        except Rejected as r:
            self._reject("Join", r, learner_id)
            respond((False, r.reason.value, None, 0.0), SMALL_MESSAGE)
            return
        self.sim.emit("syncer", ev.Join, learner_id=learner_id, learner_incarnation=incarnation,
                      incarnation_index=res.incarnation_index, rejoined=res.rejoined)
        respond((True, "", res, self.progress()), SMALL_MESSAGE)

    def handle_state(self, respond: Respond, abort: Callable[[], None]) -> None:
        assert self.state is not None
        values = [self.state.fragment_value(p) for p in range(len(self.sim.fragments))]
        respond(values, self.sim.problem.real_bytes(list(self.state.params)))

    def handle_leave(self, learner_id: str, incarnation: str, why: str, respond: Respond,
                     abort: Callable[[], None]) -> None:
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

    def handle_report(self, learner_id: str, incarnation: str, step: int, tokens: int, step_time_s: float,
                      respond: Respond, abort: Callable[[], None]) -> None:
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
        specs = tensor_specs(c.tensors)
        try:
            st.announce(c.learner_id, c.incarnation, c.fragment, c.base_version, specs, c.c_steps, c.c_tokens,
                        self.sim.loop.now, c.round)
        except Rejected:
            pass

    def handle_upload(self, c: Contribution, nbytes: int, respond: Respond, abort: Callable[[], None]) -> None:
        st = self.state
        assert st is not None
        header_step = self.header_steps.pop(c.key, 0.0)
        try:
            res = st.submit(c, self.sim.loop.now)
        except Rejected as r:
            self._reject("Upload", r, c.learner_id, c.fragment, c.base_version)
            current = st.versions[c.fragment] if 0 <= c.fragment < len(st.versions) else -1
            respond((False, r.reason.value, current, st.clock_reading(self.sim.loop.now), header_step), SMALL_MESSAGE)
            return
        self.sim.emit("syncer", ev.Upload, learner_id=c.learner_id, learner_incarnation=c.incarnation,
                      fragment=c.fragment, base_version=c.base_version, bytes=nbytes, seconds=c.upload_seconds,
                      c_steps=c.c_steps, c_tokens=c.c_tokens, duplicate=res.duplicate, round=c.round, late=res.late,
                      digest=digest(c.tensors))
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
        d = next_wake(self.state, self.sim.loop.now, result_fixed=self.finalized)
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
        for a in tick(st, now, eval_every=cfg.syncer.eval_every_merges, result_fixed=self.finalized):
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
                self.finalized = True  # the result is fixed at the budget; a settle phase may follow
                self._checkpoint()
                self.sim.emit("syncer", ev.Finished, tokens_total=st.tokens_total, merges_total=st.merges_total,
                              versions=list(st.versions))
                self._eval(final=True)
            else:
                self.sim.emit("syncer", ev.Settled, seconds=a.seconds, awaited=list(a.awaited),
                              merges_total=a.merges_total)
        if self.finalized and st.finished and self._finished_at is None:
            self._finished_at = now
            self.sim.loop.after(0.2, self._maybe_exit)
        self.arm()

    def _wake(self, fragment: int) -> None:
        assert self.state is not None
        ready = [w for w in self.waiters if w.fragment == fragment and self.state.versions[fragment] >= w.want]
        for w in ready:
            self.waiters.remove(w)
            self._send_fragment(fragment, w.respond)

    def _maybe_exit(self) -> None:
        """As the real syncer: exit once every learner left, or after 2 × liveness timeout."""
        if not self.up or self.exited:
            return
        st = self.state
        assert st is not None and self._finished_at is not None
        now = self.sim.loop.now
        all_left = all(r.left or not r.active(now, st.policy.liveness_timeout_s) for r in st.learners.values())
        if self.paused or not (all_left or now - self._finished_at > 2 * st.policy.liveness_timeout_s):
            self.sim.loop.after(0.2, self._maybe_exit)
            return
        self.sim.emit("syncer", ev.SyncerStop, why="finished", versions=list(st.versions),
                      merges_total=st.merges_total)
        self.exited = True
        self.crash()
        self.sim.on_syncer_exit()

    def _checkpoint(self) -> None:
        st = self.state
        assert st is not None
        arrays, meta = st.to_checkpoint()
        self.checkpoint = ({k: np.array(v, copy=True) for k, v in arrays.items()}, dict(meta))
        self.sim.emit("syncer", ev.Checkpoint, merges_total=st.merges_total, versions=list(st.versions),
                      path="sim", seconds=0.0, params_finite=st.params_all_finite(),
                      digests=fragment_digests(st.fragment_digests()), state_digest=st.state_digest())

    def _eval(self, final: bool) -> None:
        st = self.state
        assert st is not None
        self.sim.emit("syncer", ev.Eval, merges_total=st.merges_total, versions=list(st.versions),
                      loss=self.sim.problem.loss(st.params), loss_floor=self.sim.problem.floor,
                      tokens_total=st.tokens_total, final=final)


@dataclass
class _Job:
    start: SyncStart
    arrays: dict[str, np.ndarray]  # the outer gradient Θ(base) − θ, computed when the sync starts


class LearnerNode:
    """One learner id across its incarnations: alive or dead, running or paused."""

    def __init__(self, sim: SimHost, learner_id: str, index: int) -> None:
        self.sim = sim
        self.lid = learner_id
        self.index = index
        self.starts = 0
        self.alive = False
        self.exited = False  # stopped by itself (budget reached) rather than killed
        self.paused = False
        self.incarnation = ""
        self.corrupt = ""
        self.slow: dict[str, float] = {}  # fault id -> step-time factor
        self._deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._reset()

    def _reset(self) -> None:
        cfg = self.sim.cfg
        n = cfg.algorithm.num_fragments
        self.book: LearnerBook | None = None
        self.params: dict[str, np.ndarray] = {}
        self.base: dict[str, np.ndarray] = {}
        self.step = 0
        self.tokens = 0
        self.progress = 0.0
        self.clock = StepClock()  # the syncer's step clock as last heard, on virtual time
        self.incarnation_index = 0
        self.drawn = 0
        self.want = [0] * n
        self.got = [-1] * n
        self.fetching = [False] * n
        self.uploads: deque[_Job] = deque()
        self.uploading = False
        self.need_rejoin = False
        self.stop_requested = False
        self.waiting_since: float | None = None
        self.blocked_s = 0.0
        self.boundaries = StepTimes()  # as the trainer's learner: how far ahead to look when it syncs
        self.header_lags = HeaderLags()  # ... and how late its uploads' headers were counted
        self.stepping_s = 0.0  # the duration of the step under way
        self.step_pending = False
        self.down_since: float | None = None
        self.timers: list[Any] = []
        self._deferred = []

    # ---- plumbing -----------------------------------------------------------------
    def emit(self, kind: type, **fields: Any) -> None:
        self.sim.emit(self.lid, kind, **fields)

    def _heard_clock(self, reading: tuple[float, float]) -> None:
        self.clock = StepClock.received(self.sim.loop.now, *reading)

    def deliver(self, incarnation: str, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` if this incarnation still lives; a paused process handles it on resume."""
        if not self.alive or incarnation != self.incarnation:
            return
        if self.paused:
            self._deferred.append((fn, args))
            return
        fn(*args)

    def later(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        inc = self.incarnation
        if len(self.timers) > 256:  # forget fired timers: only pending ones need cancelling on a kill
            self.timers = [t for t in self.timers if t.when > self.sim.loop.now and not t.cancelled]
        self.timers.append(self.sim.loop.after(delay, self.deliver, inc, fn, *args))

    def rpc(self, req_bytes: int, handler: Callable[[Respond, Callable[[], None]], None],
            on_reply: Callable[[Any], None], on_fail: Callable[[], None],
            on_header: Callable[[], None] | None = None) -> None:
        self.sim.rpc(self, req_bytes, handler, on_reply, on_fail, on_header)

    def _down(self) -> None:
        if self.down_since is None:
            self.down_since = self.sim.loop.now
            self.emit(ev.Unreachable, error="simulated: no reply before the RPC deadline")

    def _up(self) -> None:
        if self.down_since is not None:
            self.emit(ev.Reconnected, down_s=self.sim.loop.now - self.down_since)
            self.down_since = None

    # ---- lifecycle ------------------------------------------------------------------
    def start(self, corrupt: str = "") -> None:
        self._reset()
        self.incarnation = f"{self.lid}.{self.starts}"
        self.starts += 1
        self.alive, self.exited, self.paused, self.corrupt = True, False, False, corrupt
        self.emit(ev.LearnerStart, learner_id=self.lid, learner_incarnation=self.incarnation, pid=0, syncer="sim",
                  config_hash=self.sim.config_hash, corrupt=corrupt)
        self._join(fetch_state=True)

    def kill(self) -> None:
        self.alive = False
        for t in self.timers:
            t.cancel()
        self.timers = []

    def graceful_stop(self, why: str) -> None:
        if self.alive:
            self._shutdown(why)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        deferred, self._deferred = self._deferred, []
        for fn, args in deferred:
            if self.alive and not self.paused:
                fn(*args)
        if self.step_pending and self.alive:
            self.step_pending = False
            self._step()

    def _shutdown(self, why: str) -> None:
        syncer, lid, inc = self.sim.syncer, self.lid, self.incarnation
        self.rpc(SMALL_MESSAGE, lambda r, a: syncer.handle_leave(lid, inc, why, r, a), lambda _: None, lambda: None)
        self.emit(ev.LearnerStop, why=why, step=self.step, tokens=self.tokens)
        self.kill()
        self.exited = True

    # ---- join and state -------------------------------------------------------------
    def _join(self, fetch_state: bool) -> None:
        syncer, lid, inc = self.sim.syncer, self.lid, self.incarnation
        self.rpc(SMALL_MESSAGE, lambda r, a: syncer.handle_join(lid, inc, r, a),
                 lambda reply: self._joined(reply, fetch_state), lambda: self._join_failed(fetch_state))

    def _join_failed(self, fetch_state: bool) -> None:
        self._down()
        if fetch_state:
            self.later(1.0, self._join, True)  # the process retries until the syncer answers

    def _joined(self, reply: tuple, fetch_state: bool) -> None:
        ok, reason, res, progress = reply
        if not ok:
            self.emit(ev.LearnerStop, why=f"error: syncer refused Join: {reason}", step=self.step, tokens=self.tokens)
            self.kill()
            self.exited = True
            return
        self._up()
        self.need_rejoin = False
        self.incarnation_index = res.incarnation_index
        self.progress = max(self.progress, progress)
        self._heard_clock(res.clock)
        self.emit(ev.LearnerJoin, learner_incarnation=self.incarnation, incarnation_index=res.incarnation_index,
                  versions=list(res.versions), syncer_incarnation=self.sim.syncer.incarnation)
        if fetch_state:
            t0 = self.sim.loop.now
            syncer = self.sim.syncer
            self.rpc(SMALL_MESSAGE, syncer.handle_state, lambda values: self._got_state(values, t0),
                     lambda: self._join_failed(True))

    def _got_state(self, values: list[tuple[int, dict[str, np.ndarray]]], t0: float) -> None:
        a = self.sim.cfg.algorithm
        self.base = {n: t for _, tensors in values for n, t in tensors.items()}
        self.params = {n: t.copy() for n, t in self.base.items()}
        versions = [v for v, _ in values]
        self.book = LearnerBook(FragmentSchedule(a.num_fragments, a.sync_every, a.overlap_floor, bool(a.staggered)),
                                versions, blocking=bool(a.blocking), clocked=a.rounds == "clock",
                                start_step=self.clock.step_at(self.sim.loop.now))
        self.rng = np.random.default_rng([self.sim.cfg.seed, self.index, self.incarnation_index])  # its "data"
        self.drawn = 0
        self.corrupt_rng = np.random.default_rng([self.sim.cfg.seed, self.index, 0xC0])
        self.emit(ev.StateFetch, versions=versions, seconds=self.sim.loop.now - t0,
                  digests=[digest({n: self.params[n] for n in tensors}) for _, tensors in values])
        self.later(self.sim.cfg.learner.report_interval_s, self._report_tick)
        self._schedule_step()

    # ---- the step loop --------------------------------------------------------------
    @property
    def data_stream(self) -> list[int]:
        """The key of the noise stream it draws (its "data"), read off the generator it really uses."""
        entropy = self.rng.bit_generator.seed_seq.entropy  # type: ignore[attr-defined]
        return [int(x) for x in entropy] if isinstance(entropy, (list, tuple)) else [int(entropy)]

    def nominal_step_time(self) -> float:
        """This learner's step time without faults (what its reports say)."""
        return self.sim.opts.step_times.get(self.lid, self.sim.opts.step_time_s)

    def step_time(self) -> float:
        base = self.nominal_step_time()
        factor = float(np.prod(list(self.slow.values()))) if self.slow else 1.0
        jitter = self.sim.opts.step_jitter
        return base * factor * (1.0 + (float(self.sim.rng.uniform(-jitter, jitter)) if jitter else 0.0))

    def _schedule_step(self) -> None:
        self.stepping_s = self.step_time()
        self.later(self.stepping_s, self._step)

    def _step(self) -> None:
        if self.paused:
            self.step_pending = True
            return
        if self.stop_requested:
            self._shutdown("finished")
            return
        book = self.book
        assert book is not None
        cfg = self.sim.cfg
        grads = None
        if cfg.algorithm.mode == "data-parallel":  # as the trainer: upload the gradient, the syncer runs AdamW
            grads = self.sim.problem.gradient(self.params, self.index, self.rng)
        else:
            lr = self.sim.opts.inner_lr * lr_scale(cfg.inner, self.progress)
            self.params = self.sim.problem.sgd_step(self.params, self.index, lr, self.rng)
        self.drawn += 1
        self.step += 1
        per = self.sim.tokens_per_step
        self.tokens += per
        self.boundaries = self.boundaries.update(self.stepping_s)
        rule, h = cfg.learner.sync_lookahead, cfg.algorithm.sync_every
        margin = self.header_lags.margin(rule, h)
        ahead = lookahead_s(rule, self.boundaries, h, self.nominal_step_time()) + margin * self.clock.pace_s
        for s in book.on_step(self.step, per, sync_step(self.clock, self.sim.loop.now, ahead)):
            names = self.sim.fragment_names[s.fragment]
            self.emit(ev.SyncStartEvent, fragment=s.fragment, base_version=s.base_version, c_steps=s.c_steps,
                      c_tokens=s.c_tokens, step=s.step, round=s.round, clock_step=self.clock.step_at(self.sim.loop.now),
                      lookahead_s=ahead, lag_margin_steps=margin, base_digest=digest({n: self.base[n] for n in names}))
            arrays = {n: grads[n] if grads is not None else self.base[n] - self.params[n] for n in names}
            if self.corrupt:
                arrays = corrupted(arrays, self.corrupt, self.corrupt_rng)
            self.uploads.append(_Job(s, arrays))
        self._pump_uploads()
        self._apply_ready()
        if self.step % cfg.learner.step_event_every == 0:
            self.emit(ev.Step, step=self.step, loss=self.sim.problem.loss(self.params), tokens=self.tokens,
                      step_time_s=self.step_time(), blocked_s=self.blocked_s,
                      data=ev.DataPosition(stream=self.data_stream, batches=self.drawn))
            self.blocked_s = 0.0
        if book.waiting_for(self.step):
            self.waiting_since = self.sim.loop.now  # blocking modes: wait for the merged fragments
            return
        self._schedule_step()

    def _apply_ready(self) -> None:
        assert self.book is not None
        alpha = self.sim.cfg.algorithm.mix_alpha
        for p, version, tensors in self.book.ready(self.step):
            for n, t in tensors.items():
                self.base[n] = t
                self.params[n] = t.copy() if alpha is None else (alpha * self.params[n] + (1 - alpha) * t)
            held = self.params if alpha is None else self.base  # what must now be the syncer's bits (merge audit)
            self.emit(ev.Apply, fragment=p, version=version, step=self.step, digest=digest({n: held[n] for n in tensors}))

    def _maybe_unblock(self) -> None:
        """Something arrived: a blocked step loop may go on."""
        if self.waiting_since is None or self.book is None:
            return
        if self.stop_requested:
            self.waiting_since = None
            self._shutdown("finished")
            return
        self._apply_ready()
        if not self.book.waiting_for(self.step):
            self.blocked_s += self.sim.loop.now - self.waiting_since
            self.waiting_since = None
            self._schedule_step()

    # ---- uploads (one at a time, like the process's upload thread) ----------------------
    def _pump_uploads(self) -> None:
        if self.uploading or not self.uploads:
            return
        job = self.uploads.popleft()
        self.uploading = True
        s, syncer = job.start, self.sim.syncer
        nbytes = self.sim.problem.real_bytes(self.sim.fragment_names[s.fragment])
        t0 = self.sim.loop.now
        sent_step = self.clock.step_at(t0)
        c = Contribution(self.lid, self.incarnation, s.fragment, s.base_version, job.arrays, s.c_steps, s.c_tokens,
                         upload_seconds=self.sim.upload_seconds(self.lid, nbytes), round=s.round)
        self.rpc(nbytes, lambda r, a: syncer.handle_upload(c, nbytes, r, a),
                 lambda reply: self._uploaded(s, nbytes, t0, sent_step, *reply),
                 lambda: self._uploaded(s, nbytes, t0, sent_step, False, UNREACHABLE, -1, None, 0.0),
                 lambda: syncer.handle_upload_header(c))

    def _uploaded(self, s: SyncStart, nbytes: int, t0: float, sent_step: float, accepted: bool, reason: str,
                  current: int, clock: tuple[float, float] | None, header_step: float) -> None:
        self.uploading = False
        self.header_lags = self.header_lags.heard(sent_step, header_step)  # as the trainer's learner
        if reason == UNREACHABLE:
            self._down()
        else:
            self._up()
        if clock is not None:
            self._heard_clock(clock)
        self.emit(ev.SyncResult, fragment=s.fragment, base_version=s.base_version, round=s.round, accepted=accepted,
                  reason=reason, seconds=self.sim.loop.now - t0, bytes=nbytes)
        out = upload_outcome(accepted, reason, s.base_version, current)
        assert self.book is not None
        if out.failed:
            self.book.sync_failed(s.fragment, s.base_version)
        if out.want is not None and out.want > self.want[s.fragment]:
            self.want[s.fragment] = out.want
            self._fetch(s.fragment)
        if out.rejoin:
            self.need_rejoin = True
        if out.stop:
            self.stop_requested = True
        self._maybe_unblock()
        if self.alive:
            self._pump_uploads()

    # ---- downloads (a long poll per fragment) -----------------------------------------
    def _fetch(self, p: int) -> None:
        assert self.book is not None
        if self.fetching[p] or self.want[p] <= max(self.got[p], self.book.held[p]):
            return
        self.fetching[p] = True
        syncer, want = self.sim.syncer, self.want[p]
        self.rpc(SMALL_MESSAGE, lambda r, a: syncer.handle_fragment(p, want, r, a),
                 lambda reply: self._fetched(p, *reply), lambda: self._fetch_failed(p))

    def _fetched(self, p: int, version: int, tensors: dict[str, np.ndarray]) -> None:
        assert self.book is not None
        self._up()
        self.fetching[p] = False
        if version > max(self.got[p], self.book.held[p]):
            self.got[p] = version
            self.book.offer(p, version, tensors)
            self._maybe_unblock()
        if self.alive:
            self._fetch(p)

    def _fetch_failed(self, p: int) -> None:
        self._down()
        self.fetching[p] = False
        self.later(0.5, self._fetch, p)

    # ---- progress reports ---------------------------------------------------------------
    def _report_tick(self) -> None:
        self.later(self.sim.cfg.learner.report_interval_s, self._report_tick)
        if self.need_rejoin:
            self._join(fetch_state=False)
            return
        syncer, lid, inc = self.sim.syncer, self.lid, self.incarnation
        step, tokens, st = self.step, self.tokens, self.nominal_step_time()
        self.rpc(SMALL_MESSAGE, lambda r, a: syncer.handle_report(lid, inc, step, tokens, st, r, a),
                 lambda reply: self._reported(*reply), self._down)

    def _reported(self, ok: bool, stop: bool, reason: str, progress: float, clock: tuple[float, float]) -> None:
        self._up()
        self.progress = max(self.progress, progress)
        if ok:
            self._heard_clock(clock)
        stop_now, rejoin = report_outcome(ok, stop, reason)
        if stop_now:
            self.stop_requested = True
            self._maybe_unblock()
        if rejoin:
            self.need_rejoin = True
