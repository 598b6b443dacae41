"""The simulated learner: :class:`~trainer.core.learner_protocol.LearnerProtocol`, the learner's step protocol,
driven by the event loop exactly as the learner process drives it — one upload at a time, a long poll per
fragment, periodic reports, rejoin, stop. Only the inner step is a surrogate (:mod:`chaos.sim.problem`) and only
time is virtual.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from chaos.sim.host import SMALL_MESSAGE, Respond, SimHost
from trainer import events as ev
from trainer.core.audit import digest
from trainer.core.corruption import corrupted
from trainer.core.deadlines import deadline_s, state_deadline_s
from trainer.core.learner_book import SyncStart
from trainer.core.learner_protocol import Action, Fetch, LearnerProtocol, Note, Rejoin, take, upload_arrays
from trainer.core.replies import UNREACHABLE
from trainer.core.syncer_records import Contribution
from trainer.core.wire_formats import roundtrip
from trainer.training import lr_scale
from trainer.wire import CHUNK_BYTES

NO_REPLY = "simulated: no reply before the RPC deadline"  # a simulated call's error: it only ever times out


@dataclass
class _Job:
    start: SyncStart
    arrays: dict[str, np.ndarray]  # the outer gradient Θ(base) − θ, computed when the sync starts


def data_rng(sim: SimHost, index: int, incarnation_index: int) -> np.random.Generator:
    """Learner ``index``'s "data" from its state fetch on: the noise its inner steps draw."""
    return np.random.default_rng([sim.cfg.seed, index, incarnation_index])


def inner_step(
    sim: SimHost, params: dict[str, np.ndarray], index: int, rng: np.random.Generator, progress: float
) -> dict[str, np.ndarray]:
    """One inner step of learner ``index`` at the run's ``progress`` as it heard it (the lr schedule reads it)."""
    return sim.problem.sgd_step(params, index, sim.opts.inner_lr * lr_scale(sim.cfg.inner, progress), rng)


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
        # The protocol (counters, book, clock as heard, downloads wanted, rejoin, stop) on virtual time; it
        # reports and looks ahead by this learner's nominal step time.
        self.proto = LearnerProtocol.for_run(
            cfg.algorithm, cfg.learner, self.sim.tokens_per_step, step_time_s=self.nominal_step_time()
        )
        self.params: dict[str, np.ndarray] = {}
        self.base: dict[str, np.ndarray] = {}
        self.incarnation_index = 0
        self.drawn = 0
        self.fetching = [False] * cfg.algorithm.num_fragments
        self.uploads: deque[_Job] = deque()
        self.uploading = False
        self.waiting_since: float | None = None
        self.stepping_s = 0.0  # the duration of the step under way
        self.step_pending = False
        self.timers: list[Any] = []
        self._deferred = []

    @property
    def step(self) -> int:
        return self.proto.step

    @property
    def tokens(self) -> int:
        return self.proto.tokens

    # ---- plumbing -----------------------------------------------------------------
    def emit(self, kind: type, **fields: Any) -> None:
        self.sim.emit(self.lid, kind, **fields)

    def _act(self, actions: Iterable[Action]) -> None:
        """Carry out the protocol's actions, in order: emit, long-poll, or end a wait the syncer's stop ends."""
        for a in actions:
            if isinstance(a, Note):
                self.emit(a.kind, **a.fields)
            elif isinstance(a, Fetch):
                self._fetch(a.fragment)
            else:  # Halt
                self._maybe_unblock()

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
        on_lost: Callable[[], None] | None = None,
        on_piece: Callable[[], None] | None = None,
        deadline_s: float | None = None,
    ) -> None:
        self.sim.rpc(self, req_bytes, handler, on_reply, on_fail, on_header, on_lost, on_piece, deadline_s)

    def _down(self) -> None:
        self._act(self.proto.down(self.sim.loop.now, NO_REPLY))

    def _up(self) -> None:
        self._act(self.proto.up(self.sim.loop.now))

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
        self._act([self.proto.stopped(why)])
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
            self._act([self.proto.stopped(f"error: syncer refused Join: {reason}")])
            self.kill()
            self.exited = True
            return
        self._up()
        self.incarnation_index = res.incarnation_index
        self._act(self.proto.joined(self.sim.loop.now, progress, res.clock))
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
            state_bytes = self.sim.problem.real_bytes(list(self.sim.problem.shapes))
            self.rpc(
                SMALL_MESSAGE,
                syncer.handle_state,
                lambda values: self._got_state(values, t0),
                lambda: self._join_failed(True),
                deadline_s=state_deadline_s(self.sim.cfg.learner.rpc_timeout_s, state_bytes, CHUNK_BYTES),
            )

    def _got_state(self, values: list[tuple[int, dict[str, np.ndarray]]], t0: float) -> None:
        self.base = {n: t for _, tensors in values for n, t in tensors.items()}
        self.params = {n: t.copy() for n, t in self.base.items()}
        versions = [v for v, _ in values]
        self.proto.start(versions, self.sim.loop.now)
        self.rng = data_rng(self.sim, self.index, self.incarnation_index)
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
        proto, cfg = self.proto, self.sim.cfg
        if proto.stop:
            self._shutdown("finished")
            return
        grads = None
        if cfg.algorithm.mode == "data-parallel":  # as the trainer: upload the gradient, the syncer runs AdamW
            grads = self.sim.problem.gradient(self.params, self.index, self.rng)
        else:
            self.params = inner_step(self.sim, self.params, self.index, self.rng, proto.progress)
        self.drawn += 1
        for u in proto.stepped(self.sim.loop.now, period=self.stepping_s):
            names = self.sim.fragment_names[u.start.fragment]
            self._act([u.note(digest({n: self.base[n] for n in names}))])
            local = self.params if grads is None else grads
            arrays = upload_arrays({n: local[n] for n in names}, self.base if grads is None else None)
            if self.corrupt:  # bound: the most its steps may move a coordinate (the syncer's, for the surrogate)
                bound = u.start.c_steps * self.sim.policy.inner_lr * self.sim.policy.coordinate_step_bound
                arrays = corrupted(arrays, self.corrupt, self.corrupt_rng, bound)
            self.uploads.append(_Job(u.start, arrays))
        self._pump_uploads()
        self._apply_ready()
        if proto.summary_due:
            data = ev.DataPosition(stream=self.data_stream, batches=self.drawn)
            self._act([proto.summary(self.sim.problem.loss(self.params), self.step_time(), data)])
        if proto.waiting():
            self.waiting_since = self.sim.loop.now  # blocking modes: wait for the merged fragments
            return
        self._schedule_step()

    def _apply_ready(self) -> None:
        alpha = self.sim.cfg.algorithm.mix_alpha
        for p, version, tensors in self.proto.ready():
            held = take(self.params, self.base, tensors, alpha, lambda t: t.copy())
            self.emit(ev.Apply, fragment=p, version=version, step=self.step, digest=digest(held))

    def _maybe_unblock(self) -> None:
        """Something arrived: a blocked step loop may go on."""
        if self.waiting_since is None or self.proto.book is None:
            return
        if self.proto.stop:
            self.waiting_since = None
            self._shutdown("finished")
            return
        self._apply_ready()
        if not self.proto.waiting():
            self.proto.waited(self.sim.loop.now - self.waiting_since)
            self.waiting_since = None
            self._schedule_step()

    # ---- uploads (one at a time, like the process's upload thread) ----------------------
    def _pump_uploads(self) -> None:
        if self.uploading or not self.uploads:
            return
        job = self.uploads.popleft()
        self.uploading = True
        s, syncer = job.start, self.sim.syncer
        fmt = self.sim.cfg.algorithm.wire_format
        nbytes = self.sim.problem.real_bytes(self.sim.fragment_names[s.fragment], fmt)
        t0 = self.sim.loop.now
        sent_step = self.proto.clock.step_at(t0)
        arrays = job.arrays if fmt == "float32" else {n: roundtrip(a, fmt) for n, a in job.arrays.items()}
        c = Contribution(
            self.lid,
            self.incarnation,
            s.fragment,
            s.base_version,
            arrays,
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
            lambda: syncer.handle_upload_lost(c),
            lambda: syncer.handle_upload_piece(c),
            deadline_s(self.sim.cfg.learner.rpc_timeout_s, nbytes, CHUNK_BYTES),
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
        now = self.sim.loop.now
        self._act(
            self.proto.uploaded(
                s,
                now,
                accepted=accepted,
                reason=reason,
                seconds=now - t0,
                nbytes=nbytes,
                current_version=current,
                clock=clock,
                header_step=header_step,
                sent_step=sent_step,
                error=NO_REPLY,
            )
        )
        self._maybe_unblock()
        if self.alive:
            self._pump_uploads()

    # ---- downloads (a long poll per fragment) -----------------------------------------
    def _fetch(self, p: int) -> None:
        want = self.proto.fetch_due(p)
        if self.fetching[p] or want is None:
            return
        self.fetching[p] = True
        syncer = self.sim.syncer
        learner = self.sim.cfg.learner
        nbytes = self.sim.problem.real_bytes(self.sim.fragment_names[p])
        self.rpc(
            SMALL_MESSAGE,
            lambda r, a: syncer.handle_fragment(p, want, r, a),
            lambda reply: self._fetched(p, *reply),
            lambda: self._fetch_failed(p),
            deadline_s=deadline_s(learner.rpc_timeout_s, nbytes, CHUNK_BYTES, wait_s=learner.long_poll_s),
        )

    def _fetched(self, p: int, version: int, tensors: dict[str, np.ndarray]) -> None:
        self._up()
        self.fetching[p] = False
        if self.proto.fetched(p, version, tensors):
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
        r = self.proto.report()
        if isinstance(r, Rejoin):
            self._join(fetch_state=False)
            return
        syncer, lid, inc = self.sim.syncer, self.lid, self.incarnation
        self.rpc(
            SMALL_MESSAGE,
            lambda reply, a: syncer.handle_report(lid, inc, r.step, r.tokens, r.step_time_s, reply, a),
            lambda reply: self._reported(*reply),
            self._down,
        )

    def _reported(self, ok: bool, stop: bool, reason: str, progress: float, clock: tuple[float, float]) -> None:
        self._act(
            self.proto.reported(self.sim.loop.now, ok=ok, stop=stop, reason=reason, progress=progress, clock=clock)
        )
