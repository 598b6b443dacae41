"""The learner process: AdamW inner steps on its shard, syncing fragments in the background.

In data-parallel mode a step computes the gradient only; it is uploaded as the fragment's
contribution and the syncer applies one AdamW update to the learners' mean gradient.

The step loop never waits on the network in decoupled mode: uploads,
long-polling downloads and progress reports run on background threads and
talk to the loop through queues. The loop applies a received global fragment
τ steps after its sync started (overwrite, or α-mixing when configured). In
blocking modes (sync-diloco, data-parallel) the loop waits for the merged
fragments, as synchronous training does.

If the syncer is unreachable the learner keeps stepping, retries, and catches
up when it is back: a refused stale upload triggers a download of the current
fragment; a syncer that forgot the learner (restart) gets a fresh Join.

Run it:
    python -m trainer.learner --config run.yaml --id learner-0 --syncer 127.0.0.1:50051 --run-dir runs/x
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jax
import jax.numpy as jnp
import numpy as np

from trainer import events as ev
from trainer.client import FragmentValue, SyncClient
from trainer.config import RunConfig, add_config_arguments, config_from_arguments
from trainer.core.audit import digest
from trainer.core.corruption import CORRUPT_MODES, corrupted
from trainer.core.header_lag import HeaderLags
from trainer.core.learner_book import LearnerBook, SyncStart
from trainer.core.replies import UNREACHABLE, report_outcome, upload_outcome
from trainer.core.rounds import StepClock, sync_step
from trainer.core.step_timer import StepTimes, lookahead_s, reported_step_time
from trainer.errors import SyncerUnavailable, TrainerError
from trainer.proto import diloco_pb2 as pb
from trainer.telemetry import EventMetrics, add_metrics_arguments, expose
from trainer.training import TrainingSetup, learner_seed_index, lr_scale


@dataclass
class _UploadJob:
    start: SyncStart
    local: dict  # name -> jax array (immutable, so no copy is needed); data-parallel: the step's gradient
    base: dict | None  # name -> the global value last received (numpy, replaced not mutated); None: upload local

    def arrays(self) -> dict[str, np.ndarray]:
        """What is uploaded: the outer gradient Θ(base) − θ (computed here, off the step loop), or the gradient."""
        if self.base is None:
            return {n: np.asarray(v) for n, v in self.local.items()}
        return {n: self.base[n] - np.asarray(v) for n, v in self.local.items()}


class Comm:
    """Background communication of one learner incarnation."""

    def __init__(self, learner: Learner, fragments: list[list[str]]) -> None:
        self.l = learner
        self.client = learner.client
        self.fragments = fragments
        self.uploads: queue.Queue[_UploadJob | None] = queue.Queue()
        self.received: queue.Queue[FragmentValue] = queue.Queue()
        self.failed: queue.Queue[tuple[int, int]] = queue.Queue()
        self.stop = threading.Event()  # the learner should stop (budget reached or asked to)
        self.closing = threading.Event()  # threads should exit
        self._want = [0] * len(fragments)  # fragment -> min version wanted (0: nothing)
        self._want_cv = threading.Condition()
        self.need_rejoin = threading.Event()
        self._corrupt_rng = np.random.default_rng(learner.cfg.seed + learner_seed_index(learner.learner_id))
        self._down_since: float | None = None
        self._down_lock = threading.Lock()
        self.threads = [self._thread(self._upload_loop, "upload"), self._thread(self._report_loop, "report")]
        self.threads += [self._thread(self._download_loop, f"download-{p}", p) for p in range(len(fragments))]
        for t in self.threads:
            t.start()

    def _thread(self, target: Any, name: str, *args: Any) -> threading.Thread:
        def run() -> None:
            try:
                target(*args)
            except (grpc.RpcError, ValueError):
                # Closing the client cancels calls in flight (RpcError CANCELLED, or ValueError on a closed
                # channel): the expected way out of a long poll at shutdown, an error at any other time.
                if not self.closing.is_set():
                    raise

        return threading.Thread(target=run, name=name, daemon=True)

    # ---- reachability bookkeeping (for events) --------------------------------
    def _down(self, err: Exception) -> None:
        with self._down_lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
                self.l.log.emit(ev.Unreachable(error=str(err)[:300]))

    def _up(self) -> None:
        with self._down_lock:
            if self._down_since is not None:
                self.l.log.emit(ev.Reconnected(down_s=time.monotonic() - self._down_since))
                self._down_since = None

    def want(self, fragment: int, min_version: int) -> None:
        with self._want_cv:
            if min_version > self._want[fragment]:
                self._want[fragment] = min_version
                self._want_cv.notify_all()

    def close(self) -> None:
        """Ask the threads to exit; queued uploads are dropped (the learner has stopped, they are moot)."""
        self.closing.set()
        try:
            while True:
                self.uploads.get_nowait()
        except queue.Empty:
            pass
        self.uploads.put(None)
        with self._want_cv:
            self._want_cv.notify_all()

    def join(self, timeout_s: float) -> list[str]:
        """Wait for the threads to exit; returns the names of any still running.

        The process must not exit while a thread is inside gRPC or JAX: interpreter teardown under a running
        C++ call aborts it (SIGABRT, seen as exit code -6 on a learner that had finished cleanly).
        """
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        return [t.name for t in self.threads if t.is_alive()]

    # ---- threads ---------------------------------------------------------------
    def _upload_loop(self) -> None:
        while not self.closing.is_set():
            job = self.uploads.get()
            if job is None:
                return
            s = job.start
            t0 = time.monotonic()
            arrays = job.arrays()
            if self.l.corrupt:
                arrays = corrupted(arrays, self.l.corrupt, self._corrupt_rng)
            nbytes = sum(a.nbytes for a in arrays.values())
            sent_step = self.l.clock.step_at(time.monotonic())
            try:
                reply = self.client.upload(
                    self.l.learner_id,
                    self.l.incarnation,
                    s.fragment,
                    s.base_version,
                    arrays,
                    s.c_steps,
                    s.c_tokens,
                    s.step,
                    round=s.round,
                )
                self._up()
            except (SyncerUnavailable, TrainerError) as err:
                self._down(err)
                self.failed.put((s.fragment, s.base_version))
                self.l.log.emit(
                    ev.SyncResult(
                        fragment=s.fragment,
                        base_version=s.base_version,
                        round=s.round,
                        accepted=False,
                        reason=UNREACHABLE,
                        seconds=time.monotonic() - t0,
                        bytes=nbytes,
                    )
                )
                continue
            self.l.heard_header(sent_step, reply.header_step)
            self.l.heard_clock(reply.cluster_step, reply.step_pace_s)
            self.l.log.emit(
                ev.SyncResult(
                    fragment=s.fragment,
                    base_version=s.base_version,
                    round=s.round,
                    accepted=reply.accepted,
                    reason=reply.reason,
                    seconds=time.monotonic() - t0,
                    bytes=nbytes,
                )
            )
            out = upload_outcome(reply.accepted, reply.reason, s.base_version, reply.current_version)
            if out.failed:
                self.failed.put((s.fragment, s.base_version))
            if out.want is not None:
                self.want(s.fragment, out.want)
            if out.rejoin:
                self.need_rejoin.set()
            if out.stop:
                self.stop.set()

    def _download_loop(self, p: int) -> None:
        got = -1
        while not self.closing.is_set():
            with self._want_cv:
                while not self.closing.is_set() and self._want[p] <= max(got, self.l.held_version(p)):
                    self._want_cv.wait(1.0)
                want = self._want[p]
            if self.closing.is_set():
                return
            try:
                val = self.client.get_fragment(self.l.learner_id, p, want, self.l.cfg.learner.long_poll_s)
                self._up()
            except (SyncerUnavailable, TrainerError) as err:
                self._down(err)
                self.closing.wait(0.5)
                continue
            if val.version > max(got, self.l.held_version(p)):
                got = val.version
                self.received.put(val)

    def _report_loop(self) -> None:
        interval = self.l.cfg.learner.report_interval_s
        while not self.closing.wait(interval):
            if self.need_rejoin.is_set():
                try:
                    self.l.join(fetch_state=False)
                    self.need_rejoin.clear()
                except (SyncerUnavailable, TrainerError) as err:
                    self._down(err)
                    continue
            req = pb.ReportRequest(
                learner_id=self.l.learner_id,
                incarnation=self.l.incarnation,
                step=self.l.step,
                tokens=self.l.tokens,
                step_time_s=self.l.step_time_ema,
                loss=self.l.last_loss,
            )
            try:
                reply = self.client.report(req)
                self._up()
            except (SyncerUnavailable, TrainerError) as err:
                self._down(err)
                continue
            self.l.progress = max(self.l.progress, reply.progress)
            if reply.ok:
                self.l.heard_clock(reply.cluster_step, reply.step_pace_s)
            stop, rejoin = report_outcome(reply.ok, reply.stop, reply.reason)
            if stop:
                self.stop.set()
            if rejoin:
                self.need_rejoin.set()


class Learner:
    """One learner incarnation: join, fetch state, step, sync, stop."""

    def __init__(
        self,
        cfg: RunConfig,
        learner_id: str,
        syncer: str,
        token: str | None,
        run_dir: Path,
        tls_ca: str | None = None,
        corrupt: str | None = None,
        metrics: EventMetrics | None = None,
    ) -> None:
        self.cfg = cfg
        self.corrupt = corrupt
        self.learner_id = learner_id
        self.incarnation = uuid.uuid4().hex[:12]
        self.setup = TrainingSetup.from_config(cfg)
        self.log = ev.EventLog(
            run_dir / "events" / f"{learner_id}.jsonl",
            learner_id,
            observers=(metrics.observe,) if metrics is not None else (),
        )
        self.client = SyncClient(syncer, token, timeout_s=cfg.learner.rpc_timeout_s, tls_ca=tls_ca)
        self.step = 0
        self.tokens = 0
        self.step_time_ema = 0.0  # reported, paces the cluster's clock (step_timer.reported_step_time)
        self.boundaries = StepTimes()  # boundary-to-boundary periods (learner.sync_lookahead: quantile)
        self.header_lags = HeaderLags()  # how late its uploads' headers were counted (set by the upload thread)
        self.last_loss = float("nan")
        self.progress = 0.0  # the run's global token progress, as last reported by the syncer
        self.clock = StepClock()  # the syncer's step clock, on this process's monotonic clock (rounds: clock)
        self.incarnation_index = 0
        self.book: LearnerBook | None = None
        self.params: dict | None = None
        self.base: dict[str, np.ndarray] = {}  # global value of each tensor as last received
        self.fragments: list[list[str]] = []
        self._held: list[int] = []
        self.log.emit(
            ev.LearnerStart(
                learner_id=learner_id,
                learner_incarnation=self.incarnation,
                pid=os.getpid(),
                syncer=syncer,
                config_hash=cfg.config_hash(),
                corrupt=corrupt or "",
            )
        )

    def heard_clock(self, cluster_step: float, pace_s: float) -> None:
        """A reply carried the syncer's step clock: extrapolate from it until the next one (one reference swap)."""
        self.clock = StepClock.received(time.monotonic(), cluster_step, pace_s)

    def lookahead_s(self) -> float:
        """How far ahead this learner looks for its next step boundary (:mod:`trainer.core.step_timer`), and for
        its upload's header to be counted (:mod:`trainer.core.header_lag`)."""
        return (
            lookahead_s(
                self.cfg.learner.sync_lookahead, self.boundaries, self.cfg.algorithm.sync_every, self.step_time_ema
            )
            + self.lag_margin() * self.clock.pace_s
        )

    def lag_margin(self) -> float:
        """How many cluster steps ahead of an opening this learner aims its upload's header."""
        return self.header_lags.margin(self.cfg.learner.sync_lookahead, self.cfg.algorithm.sync_every)

    def heard_header(self, sent_step: float, header_step: float) -> None:
        """An UploadReply said when its header arrived on the syncer's clock; ``sent_step`` was this learner's
        reading when the upload left (both 0 while the clock is idle: nothing to learn)."""
        self.header_lags = self.header_lags.heard(sent_step, header_step)

    def held_version(self, p: int) -> int:
        return self._held[p] if p < len(self._held) else -1

    def join(self, fetch_state: bool) -> None:
        reply = self.client.join(self.learner_id, self.incarnation, self.cfg.config_hash())
        if not reply.ok:
            raise TrainerError(f"syncer refused Join: {reply.reason}: {reply.detail}")
        self.incarnation_index = reply.incarnation_index
        self.progress = max(self.progress, reply.progress)
        self.heard_clock(reply.cluster_step, reply.step_pace_s)
        self.fragments = [list(f.tensors) for f in sorted(reply.fragments, key=lambda f: f.fragment)]
        self.log.emit(
            ev.LearnerJoin(
                learner_incarnation=self.incarnation,
                incarnation_index=reply.incarnation_index,
                versions=list(reply.versions),
                syncer_incarnation=reply.syncer_incarnation,
            )
        )
        if fetch_state:
            t0 = time.monotonic()
            values = self.client.get_state(self.learner_id)
            self.base = {n: t for v in values for n, t in v.tensors.items()}
            self.params = {n: jnp.asarray(t) for n, t in self.base.items()}
            versions = [v.version for v in sorted(values, key=lambda v: v.fragment)]
            a = self.cfg.algorithm
            self.book = LearnerBook(
                a.fragment_schedule(),
                versions,
                blocking=a.blocking,
                clocked=a.clocked,
                start_step=self.clock.step_at(time.monotonic()),
            )
            self._held = self.book.held
            self.log.emit(
                ev.StateFetch(
                    versions=versions,
                    seconds=time.monotonic() - t0,
                    digests=[
                        digest({n: self.params[n] for n in v.tensors})
                        for v in sorted(values, key=lambda v: v.fragment)
                    ],
                )
            )

    def _apply(self, fragment: int, version: int, tensors: dict[str, np.ndarray]) -> None:
        alpha = self.cfg.algorithm.mix_alpha
        assert self.params is not None
        for n, t in tensors.items():
            self.base[n] = t
            g = jnp.asarray(t)
            self.params[n] = g if alpha is None else alpha * self.params[n] + (1 - alpha) * g
        held = self.params if alpha is None else self.base  # what must now be the syncer's bits (merge audit)
        self.log.emit(
            ev.Apply(
                fragment=fragment, version=version, step=self.step, digest=digest({n: held[n] for n in tensors})
            )
        )

    def _drain(self, comm: Comm, block_s: float = 0.0) -> None:
        assert self.book is not None
        while not comm.failed.empty():
            self.book.sync_failed(*comm.failed.get_nowait())
        try:
            val = comm.received.get(timeout=block_s) if block_s > 0 else comm.received.get_nowait()
            self.book.offer(val.fragment, val.version, val.tensors)
            while True:
                val = comm.received.get_nowait()
                self.book.offer(val.fragment, val.version, val.tensors)
        except queue.Empty:
            pass
        for p, version, tensors in self.book.ready(self.step):
            self._apply(p, version, tensors)

    def _start_together(self, train_step: Any, opt_state: Any, stop_flag: threading.Event) -> None:
        """Compile, then wait until every learner has joined (or ``start_together_s`` passed).

        With the minimum quorum at 1 the grace window (about a step) is what lets the learners' syncs of one
        fragment land in one merge; learners that start seconds apart would otherwise merge in separate groups
        for the whole run, each applying its own outer step to the fragment. The compile runs first (on a
        throwaway batch, result discarded) so that compile times do not spread the start again.
        """
        warm = jnp.asarray(next(self.setup.batches(self.learner_id, self.incarnation_index)))
        if opt_state is None:
            jax.block_until_ready(self.setup.grad_step(self.params, warm))
        else:
            jax.block_until_ready(train_step(self.params, opt_state, warm, lr_scale(self.cfg.inner, 0.0)))
        want = self.cfg.algorithm.num_learners
        t0 = time.monotonic()
        deadline = t0 + self.cfg.learner.start_together_s
        joined = 0
        while time.monotonic() < deadline and not stop_flag.is_set():
            try:
                joined = sum(1 for s in self.client.status().learners if s.active)
            except (SyncerUnavailable, TrainerError):
                joined = 0
            if joined >= want:
                break
            time.sleep(0.02)
        self.log.emit(ev.StartTogether(joined=joined, waited_s=time.monotonic() - t0))

    def run(self, stop_flag: threading.Event) -> str:
        """Train until the syncer says the budget is reached (or ``stop_flag``); returns why it stopped."""
        while True:
            try:
                self.join(fetch_state=True)
                break
            except SyncerUnavailable as err:
                self.log.emit(ev.Unreachable(error=str(err)[:300]))
                if stop_flag.wait(1.0):
                    return "signal"
        assert self.params is not None and self.book is not None
        comm = Comm(self, self.fragments)
        # Data-parallel: the learner computes the gradient and the syncer applies the one AdamW update
        # (trainer.core.outer), so the learner holds no optimizer state and its parameters only change on receipt.
        data_parallel = self.cfg.algorithm.mode == "data-parallel"
        opt_state = None if data_parallel else self.setup.optimizer.init(self.params)
        train_step = self.setup.train_step
        grad_step = self.setup.grad_step
        batches = self.setup.batches(self.learner_id, self.incarnation_index)
        if self.incarnation_index == 0 and self.cfg.learner.start_together_s > 0:
            self._start_together(train_step, opt_state, stop_flag)
        per_step = self.setup.tokens_per_step
        every = self.cfg.learner.step_event_every
        delay = self.cfg.learner.step_delay_for(self.learner_id)
        blocked = 0.0
        boundary_at: float | None = None  # the previous step boundary (perf_counter) and the wait since it
        waited = 0.0
        why = "finished"
        try:
            while True:
                if comm.stop.is_set():
                    break
                if stop_flag.is_set():
                    why = "signal"
                    break
                t0 = time.perf_counter()
                batch = jnp.asarray(next(batches))
                if data_parallel:
                    loss, grads = grad_step(self.params, batch)
                else:
                    scale = lr_scale(self.cfg.inner, self.progress)
                    self.params, opt_state, loss = train_step(self.params, opt_state, batch, scale)
                if delay:
                    time.sleep(delay)  # an emulated accelerator: JAX computes inside the sleep
                # Wait for the step itself: the step boundary is when the syncer's clock is compared with the round
                # schedule, and the step time sets the cluster's pace; async dispatch would run ahead of both.
                jax.block_until_ready(loss)
                self.step += 1
                self.tokens += per_step
                if self.step % every == 0 or self.step == 1:
                    self.last_loss = float(loss)
                now_b = time.perf_counter()  # this step boundary
                if self.step == 2:  # step 1 includes JIT compilation: not a step time
                    self.step_time_ema = now_b - t0
                elif boundary_at is not None and self.step > 2:
                    period = now_b - boundary_at - waited
                    self.step_time_ema = reported_step_time(self.step_time_ema, period)
                    self.boundaries = self.boundaries.update(period)
                boundary_at, waited = now_b, 0.0
                now_m, ahead = time.monotonic(), self.lookahead_s()
                for s in self.book.on_step(self.step, per_step, sync_step(self.clock, now_m, ahead)):
                    names = self.fragments[s.fragment]
                    self.log.emit(
                        ev.SyncStartEvent(
                            fragment=s.fragment,
                            base_version=s.base_version,
                            c_steps=s.c_steps,
                            c_tokens=s.c_tokens,
                            step=s.step,
                            round=s.round,
                            clock_step=self.clock.step_at(now_m),
                            lookahead_s=ahead,
                            lag_margin_steps=self.lag_margin(),
                            base_digest=digest({n: self.base[n] for n in names}),
                        )
                    )
                    if data_parallel:
                        comm.uploads.put(_UploadJob(s, {n: grads[n] for n in names}, None))
                    else:
                        comm.uploads.put(
                            _UploadJob(s, {n: self.params[n] for n in names}, {n: self.base[n] for n in names})
                        )
                self._drain(comm)
                tb = time.perf_counter()
                while self.book.waiting_for(self.step) and not comm.stop.is_set() and not stop_flag.is_set():
                    self._drain(comm, block_s=0.05)
                waited = time.perf_counter() - tb
                blocked += waited
                if self.step % every == 0:
                    self.log.emit(
                        ev.Step(
                            step=self.step,
                            loss=self.last_loss,
                            tokens=self.tokens,
                            step_time_s=self.step_time_ema,
                            blocked_s=blocked,
                            data=ev.DataPosition(stream=batches.stream, batches=batches.drawn),
                        )
                    )
                    blocked = 0.0
        finally:
            comm.close()
            try:
                self.client.leave(self.learner_id, self.incarnation, why)
            except (SyncerUnavailable, TrainerError, Exception):  # noqa: BLE001 - leaving is best effort
                pass
            self.client.close()  # cancels the long polls and any upload still in flight
            running = comm.join(timeout_s=10.0)
            self.log.emit(ev.LearnerStop(why=why, step=self.step, tokens=self.tokens))
            if running:
                print(f"warning: threads still running at exit: {', '.join(running)}", file=sys.stderr)
            self.log.close()
        return why


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer.learner", description=__doc__.split("\n")[0])
    add_config_arguments(ap)
    ap.add_argument("--id", required=True, help="learner id, stable across restarts (e.g. learner-0)")
    ap.add_argument("--syncer", required=True, help="HOST:PORT of the syncer (or of this learner's proxy)")
    ap.add_argument("--run-dir", required=True, help="events/ go here")
    ap.add_argument("--token-file", help="file holding the shared token (else $DILOCO_TOKEN)")
    ap.add_argument("--tls-ca", help="CA certificate to verify the syncer's TLS certificate")
    ap.add_argument(
        "--corrupt",
        choices=CORRUPT_MODES,
        help="fault injection: upload NaN or garbage instead of real updates (chaos tests)",
    )
    ap.add_argument(
        "--corrupt-file",
        type=Path,
        help="if this file exists, start corrupt in the mode it names (Kubernetes: faults.in_pod)",
    )
    add_metrics_arguments(ap)
    args = ap.parse_args(argv)
    corrupt = args.corrupt
    if corrupt is None and args.corrupt_file is not None and args.corrupt_file.exists():
        corrupt = args.corrupt_file.read_text().strip()
        if corrupt not in CORRUPT_MODES:
            print(
                f"error: {args.corrupt_file} names corrupt mode {corrupt!r}; it must be one of {CORRUPT_MODES}",
                file=sys.stderr,
            )
            return 2
    cfg = config_from_arguments(args)
    token = Path(args.token_file).read_text().strip() if args.token_file else os.environ.get("DILOCO_TOKEN")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    learner = Learner(
        cfg,
        args.id,
        args.syncer,
        token,
        Path(args.run_dir),
        tls_ca=args.tls_ca,
        corrupt=corrupt,
        metrics=expose(args, Path(args.run_dir), args.id, "learner"),
    )
    try:
        learner.run(stop)
    except TrainerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
