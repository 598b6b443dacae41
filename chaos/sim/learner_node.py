"""The simulated learner: :class:`~trainer.core.learner_book.LearnerBook` and
:func:`~trainer.core.replies.upload_outcome` driven by the event loop exactly as the learner process drives them —
one upload at a time, a long poll per fragment, periodic reports, rejoin, stop. Only the inner step is a surrogate
(:mod:`chaos.sim.problem`) and only time is virtual.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from chaos.sim.host import SMALL_MESSAGE, Respond, SimHost
from trainer import events as ev
from trainer.core.audit import digest
from trainer.core.corruption import corrupted
from trainer.core.header_lag import HeaderLags
from trainer.core.learner_book import LearnerBook, SyncStart
from trainer.core.replies import UNREACHABLE, report_outcome, upload_outcome
from trainer.core.rounds import StepClock, sync_step
from trainer.core.step_timer import StepTimes, lookahead_s
from trainer.core.syncer_state import Contribution
from trainer.training import lr_scale


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

    def rpc(
        self,
        req_bytes: int,
        handler: Callable[[Respond, Callable[[], None]], None],
        on_reply: Callable[[Any], None],
        on_fail: Callable[[], None],
        on_header: Callable[[], None] | None = None,
    ) -> None:
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
        self.emit(
            ev.LearnerStart,
            learner_id=self.lid,
            learner_incarnation=self.incarnation,
            pid=0,
            syncer="sim",
            config_hash=self.sim.config_hash,
            corrupt=corrupt,
        )
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
        self.rpc(
            SMALL_MESSAGE, lambda r, a: syncer.handle_leave(lid, inc, why, r, a), lambda _: None, lambda: None
        )
        self.emit(ev.LearnerStop, why=why, step=self.step, tokens=self.tokens)
        self.kill()
        self.exited = True

    # ---- join and state -------------------------------------------------------------
    def _join(self, fetch_state: bool) -> None:
        syncer, lid, inc = self.sim.syncer, self.lid, self.incarnation
        self.rpc(
            SMALL_MESSAGE,
            lambda r, a: syncer.handle_join(lid, inc, r, a),
            lambda reply: self._joined(reply, fetch_state),
            lambda: self._join_failed(fetch_state),
        )

    def _join_failed(self, fetch_state: bool) -> None:
        self._down()
        if fetch_state:
            self.later(1.0, self._join, True)  # the process retries until the syncer answers

    def _joined(self, reply: tuple, fetch_state: bool) -> None:
        ok, reason, res, progress = reply
        if not ok:
            self.emit(
                ev.LearnerStop, why=f"error: syncer refused Join: {reason}", step=self.step, tokens=self.tokens
            )
            self.kill()
            self.exited = True
            return
        self._up()
        self.need_rejoin = False
        self.incarnation_index = res.incarnation_index
        self.progress = max(self.progress, progress)
        self._heard_clock(res.clock)
        self.emit(
            ev.LearnerJoin,
            learner_incarnation=self.incarnation,
            incarnation_index=res.incarnation_index,
            versions=list(res.versions),
            syncer_incarnation=self.sim.syncer.incarnation,
        )
        if fetch_state:
            t0 = self.sim.loop.now
            syncer = self.sim.syncer
            self.rpc(
                SMALL_MESSAGE,
                syncer.handle_state,
                lambda values: self._got_state(values, t0),
                lambda: self._join_failed(True),
            )

    def _got_state(self, values: list[tuple[int, dict[str, np.ndarray]]], t0: float) -> None:
        a = self.sim.cfg.algorithm
        self.base = {n: t for _, tensors in values for n, t in tensors.items()}
        self.params = {n: t.copy() for n, t in self.base.items()}
        versions = [v for v, _ in values]
        self.book = LearnerBook(
            a.fragment_schedule(),
            versions,
            blocking=a.blocking,
            clocked=a.clocked,
            start_step=self.clock.step_at(self.sim.loop.now),
        )
        self.rng = np.random.default_rng([self.sim.cfg.seed, self.index, self.incarnation_index])  # its "data"
        self.drawn = 0
        self.corrupt_rng = np.random.default_rng([self.sim.cfg.seed, self.index, 0xC0])
        self.emit(
            ev.StateFetch,
            versions=versions,
            seconds=self.sim.loop.now - t0,
            digests=[digest({n: self.params[n] for n in tensors}) for _, tensors in values],
        )
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
            self.emit(
                ev.SyncStartEvent,
                fragment=s.fragment,
                base_version=s.base_version,
                c_steps=s.c_steps,
                c_tokens=s.c_tokens,
                step=s.step,
                round=s.round,
                clock_step=self.clock.step_at(self.sim.loop.now),
                lookahead_s=ahead,
                lag_margin_steps=margin,
                base_digest=digest({n: self.base[n] for n in names}),
            )
            arrays = {n: grads[n] if grads is not None else self.base[n] - self.params[n] for n in names}
            if self.corrupt:
                arrays = corrupted(arrays, self.corrupt, self.corrupt_rng)
            self.uploads.append(_Job(s, arrays))
        self._pump_uploads()
        self._apply_ready()
        if self.step % cfg.learner.step_event_every == 0:
            self.emit(
                ev.Step,
                step=self.step,
                loss=self.sim.problem.loss(self.params),
                tokens=self.tokens,
                step_time_s=self.step_time(),
                blocked_s=self.blocked_s,
                data=ev.DataPosition(stream=self.data_stream, batches=self.drawn),
            )
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
            self.emit(
                ev.Apply, fragment=p, version=version, step=self.step, digest=digest({n: held[n] for n in tensors})
            )

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
        c = Contribution(
            self.lid,
            self.incarnation,
            s.fragment,
            s.base_version,
            job.arrays,
            s.c_steps,
            s.c_tokens,
            upload_seconds=self.sim.upload_seconds(self.lid, nbytes),
            round=s.round,
        )
        self.rpc(
            nbytes,
            lambda r, a: syncer.handle_upload(c, nbytes, r, a),
            lambda reply: self._uploaded(s, nbytes, t0, sent_step, *reply),
            lambda: self._uploaded(s, nbytes, t0, sent_step, False, UNREACHABLE, -1, None, 0.0),
            lambda: syncer.handle_upload_header(c),
        )

    def _uploaded(
        self,
        s: SyncStart,
        nbytes: int,
        t0: float,
        sent_step: float,
        accepted: bool,
        reason: str,
        current: int,
        clock: tuple[float, float] | None,
        header_step: float,
    ) -> None:
        self.uploading = False
        self.header_lags = self.header_lags.heard(sent_step, header_step)  # as the trainer's learner
        if reason == UNREACHABLE:
            self._down()
        else:
            self._up()
        if clock is not None:
            self._heard_clock(clock)
        self.emit(
            ev.SyncResult,
            fragment=s.fragment,
            base_version=s.base_version,
            round=s.round,
            accepted=accepted,
            reason=reason,
            seconds=self.sim.loop.now - t0,
            bytes=nbytes,
        )
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
        self.rpc(
            SMALL_MESSAGE,
            lambda r, a: syncer.handle_fragment(p, want, r, a),
            lambda reply: self._fetched(p, *reply),
            lambda: self._fetch_failed(p),
        )

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
        self.rpc(
            SMALL_MESSAGE,
            lambda r, a: syncer.handle_report(lid, inc, step, tokens, st, r, a),
            lambda reply: self._reported(*reply),
            self._down,
        )

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
