"""The learner process: AdamW inner steps on its shard, syncing fragments in the background.

In data-parallel mode a step computes the gradient only; it is uploaded as the fragment's
contribution and the syncer applies one AdamW update to the learners' mean gradient.

The step loop never waits on the network in decoupled mode: uploads,
long-polling downloads and progress reports run on background threads. What
the learner decides — which fragments sync after a step, when a received
global fragment is applied (τ steps after its sync started; overwrite, or
α-mixing when configured), what to do with the syncer's replies — is the
learner's step protocol (:mod:`trainer.core.learner_protocol`, which
deterministic mode drives too); the loop and the threads share it under one
lock. In blocking modes (sync-diloco, data-parallel) the loop waits for the
merged fragments, as synchronous training does.

If the syncer is unreachable the learner keeps stepping, retries, and catches
up when it is back: a refused stale upload triggers a download of the current
fragment; a syncer that forgot the learner (restart) gets a fresh Join.

Run it:
    python -m trainer.learner --config run.yaml --id learner-0 --syncer 127.0.0.1:50051 --run-dir runs/x

Why one module: it is the process, whole: the step loop, its upload, download and report threads, joining and
``main``. Every decision in it is the step protocol's (:mod:`trainer.core.learner_protocol`).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import queue
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jax
import jax.numpy as jnp
import numpy as np

from trainer import events as ev
from trainer.client import SyncClient, fragment_nbytes
from trainer.config import RunConfig, add_config_arguments, config_from_arguments
from trainer.core import wire_formats
from trainer.core.audit import digest
from trainer.core.claims import ADAM_STEP_BOUND
from trainer.core.corruption import CORRUPT_MODES, corrupted
from trainer.core.learner_book import SyncStart
from trainer.core.learner_protocol import Action, LearnerProtocol, Note, Rejoin, take, upload_arrays
from trainer.core.replies import UNREACHABLE
from trainer.core.step_timer import reported_step_time
from trainer.errors import SyncerUnavailable, TrainerError
from trainer.model import param_shapes
from trainer.proto import diloco_pb2 as pb
from trainer.telemetry import EventMetrics, add_metrics_arguments, expose
from trainer.training import TrainingSetup, learner_seed_index, lr_scale

# The learner's sync threads carry this prefix in the name the OS shows (/proc/<pid>/task/<tid>/comm, top -H,
# perf), so a profile or benchmarks.costs.learner_overhead tells their CPU from the step loop's.
SYNC_THREAD_PREFIX = "sync-"


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (the first 15 bytes) where the OS shows it: Python 3.11 names its threads
    only for itself. Best effort: Linux's ``prctl(PR_SET_NAME)``; nothing where there is none."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # 15: PR_SET_NAME
    except (OSError, AttributeError):
        pass


@dataclass
class _UploadJob:
    start: SyncStart
    local: dict  # name -> jax array (immutable, so no copy is needed); data-parallel: the step's gradient
    base: dict | None  # name -> the global value last received (numpy, replaced not mutated); None: upload local

    def arrays(self) -> dict[str, np.ndarray]:
        """What is uploaded: the outer gradient Θ(base) − θ (computed here, off the step loop), or the gradient."""
        return upload_arrays({n: np.asarray(v) for n, v in self.local.items()}, self.base)


class Comm:
    """Background communication of one learner incarnation: upload, report and download threads, each taking the
    protocol's decisions on what came back (:meth:`Learner.act`) and doing the I/O they ask for."""

    def __init__(self, learner: Learner, fragments: list[list[str]]) -> None:
        self.l = learner
        self.client = learner.client
        self.fragments = fragments
        self.nbytes = [fragment_nbytes({n: learner.shapes[n] for n in names}) for names in fragments]  # deadlines
        self.uploads: queue.Queue[_UploadJob | None] = queue.Queue()
        self.closing = threading.Event()  # threads should exit
        self._corrupt_rng = np.random.default_rng(learner.cfg.seed + learner_seed_index(learner.learner_id))
        self.threads = [self._thread(self._upload_loop, "upload"), self._thread(self._report_loop, "report")]
        self.threads += [self._thread(self._download_loop, f"download-{p}", p) for p in range(len(fragments))]
        for t in self.threads:
            t.start()

    def _thread(self, target: Any, name: str, *args: Any) -> threading.Thread:
        def run() -> None:
            name_os_thread(SYNC_THREAD_PREFIX + name)
            try:
                target(*args)
            except (grpc.RpcError, ValueError):
                # Closing the client cancels calls in flight (RpcError CANCELLED, or ValueError on a closed
                # channel): the expected way out of a long poll at shutdown, an error at any other time.
                if not self.closing.is_set():
                    raise

        return threading.Thread(target=run, name=name, daemon=True)

    def _down(self, err: Exception) -> None:
        self.l.act(self.l.proto.down, time.monotonic(), str(err)[:300])

    def close(self) -> None:
        """Ask the threads to exit; queued uploads are dropped (the learner has stopped, they are moot)."""
        self.closing.set()
        try:
            while True:
                self.uploads.get_nowait()
        except queue.Empty:
            pass
        self.uploads.put(None)
        with self.l.cv:
            self.l.cv.notify_all()

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
            if self.l.corrupt:  # bound: the most its steps may move a coordinate (push stays within it)
                bound = s.c_steps * self.l.cfg.inner.lr * ADAM_STEP_BOUND
                arrays = corrupted(arrays, self.l.corrupt, self._corrupt_rng, bound)
            fmt = self.l.cfg.algorithm.wire_format
            nbytes = sum(wire_formats.nbytes(fmt, a.size) for a in arrays.values())  # on the wire
            sent_step = self.l.proto.clock.step_at(time.monotonic())
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
                    wire_format=fmt,
                )
            except (SyncerUnavailable, TrainerError) as err:
                seconds = time.monotonic() - t0
                self.l.act(
                    self.l.proto.uploaded,
                    s,
                    time.monotonic(),
                    accepted=False,
                    reason=UNREACHABLE,
                    seconds=seconds,
                    nbytes=nbytes,
                    error=str(err)[:300],
                )
                continue
            self.l.act(
                self.l.proto.uploaded,
                s,
                time.monotonic(),
                accepted=reply.accepted,
                reason=reply.reason,
                seconds=time.monotonic() - t0,
                nbytes=nbytes,
                current_version=reply.current_version,
                clock=(reply.cluster_step, reply.step_pace_s),
                header_step=reply.header_step,
                sent_step=sent_step,
            )

    def _download_loop(self, p: int) -> None:
        proto, cv = self.l.proto, self.l.cv
        while not self.closing.is_set():
            with cv:
                while not self.closing.is_set() and proto.fetch_due(p) is None:
                    cv.wait(1.0)
                want = proto.fetch_due(p)
            if self.closing.is_set() or want is None:
                return
            try:
                val = self.client.get_fragment(
                    self.l.learner_id, p, want, self.l.cfg.learner.long_poll_s, self.nbytes[p]
                )
            except (SyncerUnavailable, TrainerError) as err:
                self._down(err)
                self.closing.wait(0.5)
                continue
            with cv:
                self.l.act(proto.up, time.monotonic())
                proto.fetched(p, val.version, val.tensors)
                cv.notify_all()  # a waiting step loop may apply it

    def _report_loop(self) -> None:
        interval = self.l.cfg.learner.report_interval_s
        proto, cv = self.l.proto, self.l.cv
        while not self.closing.wait(interval):
            with cv:
                r = proto.report()
            if isinstance(r, Rejoin):
                try:
                    self.l.join(fetch_state=False)
                except (SyncerUnavailable, TrainerError) as err:
                    self._down(err)
                    continue
                with cv:
                    r = proto.report()
                if isinstance(r, Rejoin):  # refused again meanwhile: rejoin at the next tick
                    continue
            req = pb.ReportRequest(
                learner_id=self.l.learner_id,
                incarnation=self.l.incarnation,
                step=r.step,
                tokens=r.tokens,
                step_time_s=r.step_time_s,
                loss=self.l.last_loss,
            )
            try:
                reply = self.client.report(req)
            except (SyncerUnavailable, TrainerError) as err:
                self._down(err)
                continue
            self.l.act(
                proto.reported,
                time.monotonic(),
                ok=reply.ok,
                stop=reply.stop,
                reason=reply.reason,
                progress=reply.progress,
                clock=(reply.cluster_step, reply.step_pace_s),
            )


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
        # Parameter shapes: the state's and each fragment's size, which set their calls' deadlines.
        self.shapes = param_shapes(self.setup.model)
        self.log = ev.EventLog(
            run_dir / "events" / f"{learner_id}.jsonl",
            learner_id,
            observers=(metrics.observe,) if metrics is not None else (),
        )
        self.client = SyncClient(syncer, token, timeout_s=cfg.learner.rpc_timeout_s, tls_ca=tls_ca)
        # The step protocol (counters, the book, the syncer's clock on this process's monotonic clock, downloads
        # wanted, rejoin, stop), shared by the step loop and the threads under cv. Its step time is the one
        # reported, which paces the cluster's clock (step_timer.reported_step_time).
        self.proto = LearnerProtocol.for_run(cfg.algorithm, cfg.learner, self.setup.tokens_per_step)
        self.cv = threading.Condition()
        self.last_loss = float("nan")
        self.incarnation_index = 0
        self.params: dict | None = None
        self.base: dict[str, np.ndarray] = {}  # global value of each tensor as last received
        self.fragments: list[list[str]] = []
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

    def act(self, decide: Callable[..., Sequence[Action]], *args: Any, **kw: Any) -> None:
        """Take one of the protocol's decisions under its lock, emit its events in order, and wake the threads that
        wait on the protocol (a download thread on a Fetch, the step loop on a Halt)."""
        with self.cv:
            for a in decide(*args, **kw):
                if isinstance(a, Note):
                    self._emit(a)
            self.cv.notify_all()

    def _emit(self, note: Note) -> None:
        self.log.emit(note.kind(**note.fields))

    def join(self, fetch_state: bool) -> None:
        reply = self.client.join(self.learner_id, self.incarnation, self.cfg.config_hash())
        if not reply.ok:
            raise TrainerError(f"syncer refused Join: {reply.reason}: {reply.detail}")
        self.incarnation_index = reply.incarnation_index
        with self.cv:
            heard = self.proto.joined(time.monotonic(), reply.progress, (reply.cluster_step, reply.step_pace_s))
        self.fragments = [list(f.tensors) for f in sorted(reply.fragments, key=lambda f: f.fragment)]
        self.log.emit(
            ev.LearnerJoin(
                learner_incarnation=self.incarnation,
                incarnation_index=reply.incarnation_index,
                versions=list(reply.versions),
                syncer_incarnation=reply.syncer_incarnation,
            )
        )
        for note in heard:
            self._emit(note)
        if fetch_state:
            t0 = time.monotonic()
            values = self.client.get_state(self.learner_id, fragment_nbytes(self.shapes))
            self.base = {n: t for v in values for n, t in v.tensors.items()}
            self.params = {n: jnp.asarray(t) for n, t in self.base.items()}
            versions = [v.version for v in sorted(values, key=lambda v: v.fragment)]
            with self.cv:
                self.proto.start(versions, time.monotonic())
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

    def _apply_ready(self, wait_s: float = 0.0) -> None:
        """Apply the merged fragments the protocol has ready (waiting up to ``wait_s`` for one if none is)."""
        with self.cv:
            ready = self.proto.ready()
            if not ready and wait_s > 0:
                self.cv.wait(wait_s)
                ready = self.proto.ready()
        alpha = self.cfg.algorithm.mix_alpha
        assert self.params is not None
        for p, version, tensors in ready:
            held = take(self.params, self.base, tensors, alpha, jnp.asarray)
            self.log.emit(ev.Apply(fragment=p, version=version, step=self.proto.step, digest=digest(held)))

    def _waiting(self, stop_flag: threading.Event) -> bool:
        with self.cv:
            return self.proto.waiting() and not stop_flag.is_set()

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
        proto = self.proto
        assert self.params is not None and proto.book is not None
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
        every = self.cfg.learner.step_event_every
        delay = self.cfg.learner.step_delay_for(self.learner_id)
        boundary_at: float | None = None  # the previous step boundary (perf_counter) and the wait since it
        waited = 0.0
        why = "finished"
        try:
            while True:
                if proto.stop:
                    break
                if stop_flag.is_set():
                    why = "signal"
                    break
                t0 = time.perf_counter()
                batch = jnp.asarray(next(batches))
                if data_parallel:
                    loss, grads = grad_step(self.params, batch)
                else:
                    scale = lr_scale(self.cfg.inner, proto.progress)
                    self.params, opt_state, loss = train_step(self.params, opt_state, batch, scale)
                if delay:
                    time.sleep(delay)  # an emulated accelerator: JAX computes inside the sleep
                # Wait for the step itself: the step boundary is when the syncer's clock is compared with the round
                # schedule, and the step time sets the cluster's pace; async dispatch would run ahead of both.
                jax.block_until_ready(loss)
                step = proto.step + 1  # the step just taken
                if step % every == 0 or step == 1:
                    self.last_loss = float(loss)
                now_b = time.perf_counter()  # this step boundary
                step_time, period = proto.step_time_s, None
                if step == 2:  # step 1 includes JIT compilation: not a step time
                    step_time = now_b - t0
                elif boundary_at is not None and step > 2:
                    period = now_b - boundary_at - waited
                    step_time = reported_step_time(step_time, period)
                boundary_at, waited = now_b, 0.0
                with self.cv:
                    started = proto.stepped(time.monotonic(), step_time_s=step_time, period=period)
                for u in started:
                    names = self.fragments[u.start.fragment]
                    self._emit(u.note(digest({n: self.base[n] for n in names})))
                    if data_parallel:
                        comm.uploads.put(_UploadJob(u.start, {n: grads[n] for n in names}, None))
                    else:
                        local, base = {n: self.params[n] for n in names}, {n: self.base[n] for n in names}
                        comm.uploads.put(_UploadJob(u.start, local, base))
                self._apply_ready()
                tb = time.perf_counter()
                while self._waiting(stop_flag):
                    self._apply_ready(wait_s=0.05)
                waited = time.perf_counter() - tb
                proto.waited(waited)
                if proto.summary_due:
                    data = ev.DataPosition(stream=batches.stream, batches=batches.drawn)
                    self._emit(proto.summary(self.last_loss, proto.step_time_s, data))
        finally:
            comm.close()
            try:
                self.client.leave(self.learner_id, self.incarnation, why)
            except (SyncerUnavailable, TrainerError, Exception):  # noqa: BLE001 - leaving is best effort
                pass
            self.client.close()  # cancels the long polls and any upload still in flight
            running = comm.join(timeout_s=10.0)
            self._emit(proto.stopped(why))
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
    ap.add_argument(
        "--no-exit-on-finish",
        action="store_true",
        help="once training is finished, wait for SIGTERM instead of exiting (Kubernetes: a container that exits is "
        "restarted, and its files can no longer be copied out)",
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
        why = learner.run(stop)
    except TrainerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if why == "finished" and args.no_exit_on_finish:
        stop.wait()  # until SIGTERM or SIGINT
    return 0


if __name__ == "__main__":
    sys.exit(main())
