"""The syncer process: a gRPC service around :class:`trainer.core.syncer_state.SyncerState`.

Threads: gRPC handlers (validate, then mutate the state under one lock), a
merge loop (sleeps until the core's next merge deadline, merges, checkpoints
every N merges), and an evaluator (eval loss of the global model every N
merges, outside the lock). Long-polling fragment downloads wait on the same
condition variable the merge loop notifies.

Run it:
    python -m trainer.syncer --config run.yaml --run-dir runs/x --port 50051

The shared token comes from ``--token-file`` or the ``DILOCO_TOKEN``
environment variable; calls without it are refused (UNAUTHENTICATED).

Why one module: it is the process, whole: the gRPC handlers, the threads around the core, ``serve`` and ``main``.
Every decision in it is the core's (:mod:`trainer.core.syncer_state`, :mod:`trainer.core.syncer_driver`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from trainer import events as ev
from trainer.admission import FIRST_MESSAGE_S, MAX_CALL_S, AdmissionInterceptor, Pools, worker_budget
from trainer.audit_log import AuditWriter, fragment_digests
from trainer.checkpoint import (
    RESULT_NAME,
    save_checkpoint,
)
from trainer.client import specs_from_pb, specs_to_pb
from trainer.config import RunConfig, add_config_arguments, config_from_arguments
from trainer.core.claims import MAX_NAME
from trainer.core.credentials import caller, checkpoint_key, presented
from trainer.core.fragments import partition_tensors
from trainer.core.reasons import Rejected, RejectReason
from trainer.core.repeats import Repeats
from trainer.core.syncer_driver import EXIT_POLL_S, Merged, MergeRefused, ResultFixed, exit_due, next_wake, tick
from trainer.core.syncer_records import Contribution
from trainer.errors import AddressInUse, CheckpointError
from trainer.policy import merge_fields, policy_from_config, upload_fields
from trainer.proto import diloco_pb2 as pb
from trainer.proto import diloco_pb2_grpc as pbg
from trainer.restore import restore, set_aside
from trainer.telemetry import EventMetrics, add_metrics_arguments, expose
from trainer.training import TrainingSetup
from trainer.wire import Assembler, crc32, decode_tensors, encode_tensors, split_chunks

SERVICE_NAME = "diloco.v1.Syncer"
OUTSIDER_LOG_S = 10.0  # refusals of callers without a credential: one event per call and reason this often
# A learner's refusals: this many events per learner id, call and reason each OUTSIDER_LOG_S, the rest folded (an
# honest learner's refusals are each logged; an insider's flood costs the log a bounded number of lines per window).
# Not fewer: an honest learner behind a partition or a syncer restart is refused late_round ~10 times in a window
# (tests/chaos/test_under_load.py), and each one folded is a refusal the log names only by count — a count a
# SIGKILL loses (the ledger then knows it only from the burst-filling event's ``folds_for_s``).
LEARNER_LOG_BURST = 50
SYNCER_CALLS = frozenset(pb.DESCRIPTOR.services_by_name["Syncer"].methods_by_name)
# Every method this server serves (Syncer's and health's): the closed set a refusal's ``call`` label comes from.
SERVED_CALLS = SYNCER_CALLS | frozenset(health_pb2.DESCRIPTOR.services_by_name["Health"].methods_by_name)


def call_name(method: str) -> str:
    """A called method's name when the Syncer service has it, else ``unknown``: a refusal's ``call`` (an event
    field and a metric label) comes from a closed set, since an unauthenticated caller picks the path
    (docs/security.md, ``outsider-series``).

    >>> call_name("/diloco.v1.Syncer/Upload"), call_name("/diloco.v1.Syncer/x" + "9" * 10_000)
    ('Upload', 'unknown')
    """
    name = method.rsplit("/", 1)[-1]
    return name if name in SYNCER_CALLS else "unknown"


MAX_LONG_POLL_S = 30.0


class _AuthInterceptor(grpc.ServerInterceptor):
    """Refuses every Syncer call without the shared token or a learner credential derived from it
    (trainer.core.credentials); the health service stays open for probes."""

    def __init__(self, token: str, on_reject) -> None:  # noqa: ANN001
        self._secret = token
        self._on_reject = on_reject

    def intercept_service(self, continuation, details):  # noqa: ANN001
        if not details.method.startswith(f"/{SERVICE_NAME}/"):
            return continuation(details)
        got = presented(details.invocation_metadata)
        if got is not None and caller(self._secret, got) is not None:
            return continuation(details)
        reason = RejectReason.MISSING_TOKEN if got is None else RejectReason.BAD_TOKEN
        detail = (
            f"{reason.value}: present 'authorization: Bearer <token>' metadata with the run's shared token "
            "or this learner's credential"
        )
        self._on_reject(call_name(details.method), reason, detail, outsider=True)
        handler = continuation(details)

        def deny(requests, context):  # noqa: ANN001
            context.abort(grpc.StatusCode.UNAUTHENTICATED, detail)

        if handler is None:
            return None
        # Request-streaming either way: refused from the headers on, without waiting for a request that an
        # outsider need never send (a unary handler holds its worker until the message comes: trainer.admission).
        if handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(deny)
        return grpc.stream_unary_rpc_method_handler(deny)


class SyncerService(pbg.SyncerServicer):
    """gRPC handlers plus the merge and eval threads around one :class:`SyncerState`."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        *,
        address: str = "",
        exit_on_finish: bool = True,
        secret: str | None = None,
        metrics: EventMetrics | None = None,
        start_fresh: bool = False,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.pools: Pools | None = None  # the workers' pools, once served (trainer.admission): calls in flight
        # The wall time the core's decisions take as ``now``, and the timer of the durations it learns from
        # (uploads, merges, broadcasts). A test passes fake ones to drive this service and deterministic mode
        # through the same schedule (tests/unit/test_syncer_shells_agree.py).
        self.clock, self.timer = clock, timer
        self.secret = secret  # None: no auth (tests only); else who may act as which learner (_act_as)
        self.run_dir = run_dir
        self.setup = TrainingSetup.from_config(cfg)
        self.incarnation = uuid.uuid4().hex[:12]
        self.log = ev.EventLog(
            run_dir / "events" / "syncer.jsonl",
            "syncer",
            observers=(metrics.observe,) if metrics is not None else (),
            clock=clock,
        )
        self.ckpt_dir = run_dir / "checkpoints"
        self.outsider_repeats = Repeats(window_s=OUTSIDER_LOG_S)
        self.learner_repeats = Repeats(window_s=OUTSIDER_LOG_S, burst=LEARNER_LOG_BURST)
        # Checkpoints are digested under a key from the secret: one who can write the run directory but does not
        # hold the secret cannot make this syncer serve a checkpoint of its own (docs/security.md).
        self.ckpt_key = checkpoint_key(secret) if secret else None
        self.audit = AuditWriter(run_dir, cfg.syncer.audit_keep_fraction, cfg.seed, cfg.syncer.audit_keep_bytes)
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self.done = threading.Event()  # finished, final eval and checkpoint written
        self.exit_on_finish = exit_on_finish
        self.config_hash = cfg.config_hash()
        self.loss_floor = self.setup.loss_floor()
        self.eval_loss = math.nan
        self.eval_merges = -1
        self._eval_queue: queue.Queue[tuple[int, list[int], dict[str, np.ndarray], bool] | None] = queue.Queue()
        self._eval_set = self.setup.eval_set()
        self._result_fixed = False
        init = self.setup.init_params()
        self.fragments = partition_tensors({k: int(v.size) for k, v in init.items()}, cfg.algorithm.num_fragments)
        restored = restore(
            policy_from_config(cfg),
            self.fragments,
            init,
            self.ckpt_dir,
            self.ckpt_key,
            self.config_hash,
            start_fresh,
        )
        self.state = restored.state
        self.state.warm_up()  # compiled before any round is due, not in the first rounds' merges
        if restored.path is not None:
            assert restored.meta is not None
            self.log.emit(
                ev.Restore(
                    merges_total=self.state.merges_total,
                    checkpoint_versions=restored.meta["versions"],
                    versions=list(self.state.versions),
                    version_skip=restored.skip,
                    path=str(restored.path),
                    digests=fragment_digests(self.state.fragment_digests()),
                    state_digest=self.state.state_digest(version_skip=restored.skip),
                )
            )
        self.log.emit(
            ev.SyncerStart(
                syncer_incarnation=self.incarnation,
                address=address,
                config_hash=self.config_hash,
                versions=list(self.state.versions),
                restored_from_merges=self.state.restored_from_merges,
                pid=os.getpid(),
                digests=fragment_digests(self.state.fragment_digests()),
            )
        )
        # At start (fresh or restored) the core asks for a checkpoint: a crash before the first interval must
        # not restart from scratch, and a second crash must not restore the same versions again.
        with self.cond:
            assert self.state.checkpoint_due()
            written = self._checkpoint_locked()
        # Those skipped are held in the versions just written: out of the next restore's count and the rotation's way.
        if moved := set_aside(self.ckpt_dir, restored.refused, written, self.incarnation):
            print(
                f"warning: set aside {len(moved)} checkpoint(s) the restore skipped: {moved[0].parent}",
                file=sys.stderr,
            )
        self._threads = [
            threading.Thread(target=self._merge_loop, name="merge", daemon=True),
            threading.Thread(target=self._eval_loop, name="eval", daemon=True),
        ]
        for t in self._threads:
            t.start()
        with self.cond:
            self._request_eval_locked(final=False)  # the starting point every later eval is compared with

    # ---- helpers -----------------------------------------------------------
    def record_reject(
        self,
        call: str,
        reason: RejectReason,
        detail: str,
        learner_id: str = "",
        fragment: int = -1,
        base_version: int = -1,
        outsider: bool = False,
    ) -> None:
        """Count a refusal (Status) and log it; an ``outsider``'s (no valid credential) once per call, reason and
        window, a learner's :data:`LEARNER_LOG_BURST` per learner id, call, reason and window, the rest folded into
        the next one logged (trainer.core.repeats)."""
        # The id a credential proved (or the operator's token named): a wrong_learner refusal's is the caller's
        # choice, so it is not part of the kind.
        learner_id = "" if outsider or reason is RejectReason.WRONG_LEARNER else learner_id[:MAX_NAME]
        with self.cond:
            self.state.rejections[reason.value] += 1
            repeats_book = self.outsider_repeats if outsider else self.learner_repeats
            kind = (call, reason.value) if outsider else (learner_id, call, reason.value)
            now = self.timer()
            repeats = repeats_book.admit(kind, now)
            folds_for_s = repeats_book.folds_for(kind, now)
        if repeats is None:
            return
        self.log.emit(
            ev.Reject(
                call=call,
                reason=reason.value,
                detail=detail,
                learner_id=learner_id,
                fragment=fragment,
                base_version=base_version,
                repeats=repeats,
                folds_for_s=round(folds_for_s, 3),
            )
        )

    def _act_as(self, context, learner_id: str) -> None:  # noqa: ANN001
        """Refuse a call naming a learner id its credential does not (the operator's shared token names any)."""
        if self.secret is None or context is None:
            return
        who = caller(self.secret, presented(context.invocation_metadata()) or "")
        if who is None or not who.may_act_as(learner_id):
            raise Rejected(
                RejectReason.WRONG_LEARNER,
                f"this credential is learner {who.learner_id if who else '?'!r}'s; it cannot act as "
                f"{learner_id!r} — give each learner process its own (trainer.core.credentials)",
            )

    # ---- RPCs --------------------------------------------------------------
    def Join(self, request: pb.JoinRequest, context) -> pb.JoinReply:  # noqa: N802, ANN001
        try:
            self._act_as(context, request.learner_id)
            if request.config_hash != self.config_hash:
                raise Rejected(
                    RejectReason.CONFIG_MISMATCH,
                    f"learner config hash {request.config_hash!r} != syncer's {self.config_hash!r}; "
                    "start every process from the same config file",
                )
            with self.cond:
                res = self.state.join(request.learner_id, request.incarnation, self.clock())
        except Rejected as r:
            self.record_reject("Join", r.reason, r.detail, request.learner_id)
            return pb.JoinReply(ok=False, reason=r.reason.value, detail=r.detail)
        self.log.emit(
            ev.Join(
                learner_id=request.learner_id,
                learner_incarnation=request.incarnation,
                incarnation_index=res.incarnation_index,
                rejoined=res.rejoined,
            )
        )
        return pb.JoinReply(
            ok=True,
            incarnation_index=res.incarnation_index,
            syncer_incarnation=self.incarnation,
            versions=list(res.versions),
            progress=self._progress(),
            cluster_step=res.clock[0],
            step_pace_s=res.clock[1],
            fragments=[pb.FragmentLayout(fragment=f.index, tensors=list(f.names)) for f in self.fragments],
        )

    def Leave(self, request: pb.LeaveRequest, context) -> pb.LeaveReply:  # noqa: N802, ANN001
        try:
            self._act_as(context, request.learner_id)
            with self.cond:
                self.state.leave(request.learner_id, request.incarnation, self.clock())
                self.cond.notify_all()
        except Rejected as r:
            self.record_reject("Leave", r.reason, r.detail, request.learner_id)
            return pb.LeaveReply(ok=False, reason=r.reason.value, detail=r.detail)
        self.log.emit(
            ev.Leave(learner_id=request.learner_id, learner_incarnation=request.incarnation, why=request.why)
        )
        return pb.LeaveReply(ok=True)

    def Report(self, request: pb.ReportRequest, context) -> pb.ReportReply:  # noqa: N802, ANN001
        try:
            self._act_as(context, request.learner_id)
            with self.cond:
                was_stopped = self.state.stopped
                stop = self.state.report(
                    request.learner_id,
                    request.incarnation,
                    request.step,
                    request.tokens,
                    request.step_time_s,
                    self.clock(),
                )
                versions = list(self.state.versions)
                progress = self.state.progress()
                step, pace = self.state.clock_reading(self.clock())
                if stop and not was_stopped:
                    self.cond.notify_all()
        except Rejected as r:
            self.record_reject("Report", r.reason, r.detail, request.learner_id)
            return pb.ReportReply(
                ok=False, reason=r.reason.value, detail=r.detail, syncer_incarnation=self.incarnation
            )
        return pb.ReportReply(
            ok=True,
            stop=stop,
            syncer_incarnation=self.incarnation,
            versions=versions,
            progress=progress,
            cluster_step=step,
            step_pace_s=pace,
        )

    def _progress(self) -> float:
        with self.cond:
            return self.state.progress()

    def Upload(self, request_iterator: Iterator[pb.UploadChunk], context) -> pb.UploadReply:  # noqa: N802, ANN001
        t0 = self.timer()
        h = None
        announced: tuple[str, str, int, int, int] | None = None
        header_step = 0.0  # the step clock when the header was read: the learner's lag (trainer.core.header_lag)
        try:
            first = next(request_iterator, None)
            if first is None or not first.HasField("header"):
                raise Rejected(RejectReason.MALFORMED, "an upload must start with an UploadHeader message")
            h = first.header
            self._act_as(context, h.learner_id)
            specs = specs_from_pb(h.tensors)
            asm = Assembler(specs, h.total_bytes, h.crc32, self.cfg.syncer.max_upload_bytes)
            spec_map = {s.name: (s.shape, s.dtype) for s in specs}
            with self.cond:
                now = self.clock()
                header_step = self.state.cluster_step(now)
                # The header made it: its round waits (a bounded hold) for the body (trainer.core.inflight).
                self.state.announce(
                    h.learner_id,
                    h.incarnation,
                    h.fragment,
                    h.base_version,
                    spec_map,
                    h.c_steps,
                    h.c_tokens,
                    now,
                    h.round,
                )
                announced = (h.learner_id, h.incarnation, h.fragment, h.base_version, h.round)
            for msg in request_iterator:
                if not msg.HasField("data"):
                    raise Rejected(RejectReason.MALFORMED, "a second header arrived inside one upload")
                asm.add(msg.data.offset, msg.data.data)
                with self.cond:  # the bytes show the learner alive, its reports queued behind them on a slow link
                    self.state.hear_body(announced, self.clock())
            tensors = decode_tensors(specs, asm.finish())
            seconds = self.timer() - t0
            contribution = Contribution(
                h.learner_id,
                h.incarnation,
                h.fragment,
                h.base_version,
                tensors,
                h.c_steps,
                h.c_tokens,
                upload_seconds=seconds,
                round=h.round,
            )
            with self.cond:
                res = self.state.submit(contribution, self.clock())
                # Logged inside the lock: the history then shows every upload before the merge that used it.
                self.log.emit(ev.Upload(**upload_fields(contribution, res, h.total_bytes)))
                step, pace = self.state.clock_reading(self.clock())
                announced = None  # submit took it off the in-flight list
                self.cond.notify_all()
        except Rejected as r:
            lid, frag, base = (h.learner_id, h.fragment, h.base_version) if h is not None else ("", -1, -1)
            self.record_reject("Upload", r.reason, r.detail, lid, frag, base)
            with self.cond:
                current = self.state.versions[frag] if 0 <= frag < len(self.state.versions) else -1
                step, pace = self.state.clock_reading(self.clock())
            return pb.UploadReply(
                accepted=False,
                reason=r.reason.value,
                detail=r.detail,
                current_version=current,
                cluster_step=step,
                step_pace_s=pace,
                header_step=header_step,
            )
        finally:
            if announced is not None:  # the body never came whole (refused, cut, cancelled): stop waiting for it
                with self.cond:
                    self.state.withdraw(announced)
                    self.cond.notify_all()
        return pb.UploadReply(
            accepted=True,
            current_version=res.current_version,
            duplicate=res.duplicate,
            cluster_step=step,
            step_pace_s=pace,
            late=res.late,
            header_step=header_step,
        )

    def _fragment_messages(
        self, fragment: int, version: int, tensors: dict[str, np.ndarray]
    ) -> Iterator[pb.FragmentChunk]:
        specs, payload = encode_tensors(tensors)
        yield pb.FragmentChunk(
            header=pb.FragmentHeader(
                fragment=fragment,
                version=version,
                tensors=specs_to_pb(specs),
                total_bytes=len(payload),
                crc32=crc32(payload),
            )
        )
        for off, data in split_chunks(payload):
            yield pb.FragmentChunk(data=pb.DataChunk(offset=off, data=data))

    def GetFragment(self, request: pb.FragmentRequest, context) -> Iterator[pb.FragmentChunk]:  # noqa: N802, ANN001
        p = request.fragment
        if not 0 <= p < len(self.fragments):
            detail = f"fragment {p} not in 0..{len(self.fragments) - 1}"
            self.record_reject("GetFragment", RejectReason.UNKNOWN_FRAGMENT, detail, request.learner_id, p)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{RejectReason.UNKNOWN_FRAGMENT.value}: {detail}")
        wait = min(max(request.wait_s, 0.0), MAX_LONG_POLL_S) if math.isfinite(request.wait_s) else 0.0
        deadline = time.monotonic() + wait
        with self.cond:
            while (
                self.state.versions[p] < request.min_version and not self.stopping.is_set() and context.is_active()
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.5))
            version, tensors = self.state.fragment_value(p)
        t0 = self.timer()
        yield from self._fragment_messages(p, version, tensors)
        if 0 < request.min_version <= version:  # a merge's result going out: part of t_sync
            with self.cond:
                self.state.observe_broadcast_seconds(self.timer() - t0)

    def GetState(self, request: pb.StateRequest, context) -> Iterator[pb.FragmentChunk]:  # noqa: N802, ANN001
        with self.cond:
            values = [self.state.fragment_value(p) for p in range(len(self.fragments))]
        for p, (version, tensors) in enumerate(values):
            yield from self._fragment_messages(p, version, tensors)

    def Status(self, request: pb.StatusRequest, context) -> pb.StatusReply:  # noqa: N802, ANN001
        now = self.clock()
        with self.cond:
            st = self.state
            learners = [
                pb.LearnerStatus(
                    learner_id=r.learner_id,
                    incarnation=r.incarnation,
                    incarnation_index=r.incarnation_index,
                    active=r.active(now, st.policy.liveness_timeout_s),
                    step=r.step,
                    tokens=r.tokens,
                    last_seen_age_s=now - r.heard_at(),
                    merged_contributions=r.merged_contributions,
                )
                for r in st.learners.values()
            ]
            return pb.StatusReply(
                syncer_incarnation=self.incarnation,
                mode=self.cfg.algorithm.mode,
                versions=list(st.versions),
                merges=st.merges_total,
                tokens=st.tokens_total,
                token_budget=self.cfg.token_budget,
                finished=self.done.is_set(),
                learners=learners,
                last_merge_unix=[t if t is not None else 0.0 for t in st.last_merge_at],
                eval_loss=self.eval_loss,
                eval_merges=self.eval_merges,
                loss_floor=self.loss_floor,
                rejections=dict(st.rejections),
                restored_from_merges=st.restored_from_merges,
                cluster_step=st.cluster_step(now),
                step_pace_s=st.clock.pace_s,
                late_carried=st.late_carried,
            )

    # ---- background work ---------------------------------------------------
    def _checkpoint_locked(self) -> Path:
        t0 = time.monotonic()
        arrays, meta = self.state.to_checkpoint()
        meta["config_hash"] = self.config_hash
        path = save_checkpoint(self.ckpt_dir, arrays, meta, key=self.ckpt_key)
        self.log.emit(
            ev.Checkpoint(
                merges_total=self.state.merges_total,
                versions=list(self.state.versions),
                path=str(path),
                seconds=time.monotonic() - t0,
                params_finite=self.state.params_all_finite(),
                digests=fragment_digests(self.state.fragment_digests()),
                state_digest=self.state.state_digest(),
            )
        )
        return path

    def _merge_loop(self) -> None:
        """Carry out what is due (:meth:`run_due`), then sleep to the driver's next wake-up or until an upload or a
        shutdown wakes the condition."""
        while not self.stopping.is_set():
            with self.cond:
                now = self.clock()
                if self.run_due(now):
                    self.cond.notify_all()
                    continue
                wake = next_wake(self.state, now, result_fixed=self._result_fixed)
                self.cond.wait(0.5 if wake is None else min(max(wake - now, 0.001), 0.5))

    def run_due(self, now: float) -> bool:
        """Carry out what the driver says is due at ``now`` (trainer.core.syncer_driver.tick): merges with their
        events, checkpoints and evals, the fixed result, the settle phase's end. True if anything was."""
        with self.cond:
            actions = tick(
                self.state, now, eval_every=self.cfg.syncer.eval_every_merges, result_fixed=self._result_fixed
            )
            # Merge times are observed after the batch, so that each merge is timed by what decided it due (audit).
            took, acted = [], False
            while True:
                t0 = self.timer()
                a = next(actions, None)
                if a is None:
                    break
                acted = True
                if isinstance(a, Merged):
                    took.append(self.timer() - t0)
                    rec = a.record
                    audit = self.audit.record(rec.audit, self.incarnation) if rec.audit is not None else None
                    self.log.emit(ev.Merge(**merge_fields(rec, self.state.tokens_total, audit)))
                    if a.checkpoint:
                        self._checkpoint_locked()
                    if a.evaluate:
                        self._request_eval_locked(final=False)
                elif isinstance(a, MergeRefused):
                    self.record_reject("merge", RejectReason.NON_FINITE, a.why, fragment=a.fragment)
                elif isinstance(a, ResultFixed):
                    self._finalize_locked()
                else:
                    self.log.emit(
                        ev.Settled(seconds=a.seconds, awaited=list(a.awaited), merges_total=a.merges_total)
                    )
            for seconds in took:
                self.state.observe_merge_seconds(seconds)
            return acted

    def stopped(self) -> bool:
        """Learners are told to stop: the budget is reached and any settle phase is over."""
        with self.cond:
            return self.state.stopped

    def _request_eval_locked(self, final: bool) -> None:
        self._eval_queue.put((self.state.merges_total, list(self.state.versions), self.state.copy_params(), final))

    def _finalize_locked(self) -> None:
        """The budget is reached: checkpoint, ``finished``, final eval — the run's result (a settle phase may follow)."""
        self._result_fixed = True
        shutil.copyfile(self._checkpoint_locked(), self.ckpt_dir / RESULT_NAME)
        # The refusals folded so far are logged with the result, not only at exit: a syncer kept running after it
        # (--no-exit-on-finish: Kubernetes) would otherwise have its history read without them, and the ledger
        # would find learners told of refusals the syncer never recorded.
        self._log_folded_locked()
        self.log.emit(
            ev.Finished(
                tokens_total=self.state.tokens_total,
                merges_total=self.state.merges_total,
                versions=list(self.state.versions),
            )
        )
        self._request_eval_locked(final=True)

    def _log_folded_locked(self) -> None:
        """Log the refusals folded since the last logged one of their kind (trainer.core.repeats), one event per
        kind naming no upload (the ledger counts each for its refusals), and start counting afresh."""
        # (learner id, call, reason) -> refusals folded: an outsider's have no id
        folded = {("", *kind): n for kind, n in self.outsider_repeats.drain().items()}
        folded.update(self.learner_repeats.drain())
        for (learner_id, call, reason), n in sorted(folded.items()):
            self.log.emit(
                ev.Reject(
                    call=call,
                    reason=reason,
                    detail="refusals folded since the last one logged",
                    learner_id=learner_id,
                    repeats=n - 1,
                )
            )

    def _eval_loop(self) -> None:
        while True:
            item = self._eval_queue.get()
            if item is None:
                return
            merges, versions, params, final = item
            if not final and not self._eval_queue.empty():
                continue  # a newer request is waiting: skip to it
            loss = self.setup.evaluate(params, self._eval_set)
            self.eval_loss, self.eval_merges = loss, merges
            with self.cond:
                tokens = self.state.tokens_total
            self.log.emit(
                ev.Eval(
                    merges_total=merges,
                    versions=versions,
                    loss=loss,
                    loss_floor=self.loss_floor,
                    tokens_total=tokens,
                    final=final,
                )
            )
            if final:
                self.done.set()

    def exit_due(self, over_since: float) -> bool:
        """Training is over since ``over_since`` (this service's clock): whether to exit now (syncer_driver.exit_due)."""
        with self.cond:
            return exit_due(self.state, self.clock(), over_since)

    def shutdown(self, why: str) -> None:
        """Stop background work and write a final checkpoint (also on SIGTERM)."""
        if self.stopping.is_set():
            return
        with self.cond:
            self.stopping.set()
            self.cond.notify_all()
            self._checkpoint_locked()
            versions, merges = list(self.state.versions), self.state.merges_total
            self._log_folded_locked()
        self._eval_queue.put(None)
        # Join the background threads: a daemon thread still inside XLA when the interpreter exits aborts it.
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=30)
        self.log.emit(ev.SyncerStop(why=why, versions=versions, merges_total=merges))
        self.log.close()


def serve(
    cfg: RunConfig,
    run_dir: Path,
    *,
    host: str,
    port: int,
    token: str | None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    exit_on_finish: bool = True,
    max_workers: int = 64,
    max_call_s: float = MAX_CALL_S,
    first_message_s: float = FIRST_MESSAGE_S,
    metrics: EventMetrics | None = None,
    start_fresh: bool = False,
) -> tuple[grpc.Server, SyncerService, int]:
    """Start the syncer's gRPC server; returns (server, service, bound port)."""
    holder: dict[str, SyncerService] = {}

    def on_reject(call: str, reason: RejectReason, detail: str, outsider: bool = False) -> None:
        if "svc" in holder:
            holder["svc"].record_reject(call, reason, detail, outsider=outsider)

    # Workers for every caller's share of every kind of call; a caller over its share is refused at once
    # (trainer.admission).
    budget = worker_budget(cfg.algorithm.num_learners, cfg.algorithm.num_fragments, at_least=max_workers)
    max_workers = budget.workers
    pools = Pools.of(budget, cfg.algorithm.num_fragments)
    interceptors: list[grpc.ServerInterceptor] = [_AuthInterceptor(token, on_reject)] if token else []
    interceptors.append(AdmissionInterceptor(SERVICE_NAME, pools, token, on_reject, max_call_s, first_message_s))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rpc"),
        interceptors=interceptors,
        options=[
            ("grpc.keepalive_time_ms", 10_000),
            ("grpc.keepalive_timeout_ms", 5_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            ("grpc.keepalive_permit_without_calls", 1),
            # gRPC sets SO_REUSEPORT by default: a second server on a taken port would
            # then share its traffic silently. A taken port must fail loudly instead.
            ("grpc.so_reuseport", 0),
        ],
    )
    addr = f"{host}:{port}"
    try:
        if tls_cert and tls_key:
            creds = grpc.ssl_server_credentials([(open(tls_key, "rb").read(), open(tls_cert, "rb").read())])
            bound = server.add_secure_port(addr, creds)
        else:
            bound = server.add_insecure_port(addr)
    except RuntimeError:  # grpcio raises "Failed to bind" where older versions returned 0
        bound = 0
    if bound == 0:
        raise AddressInUse(
            f"cannot listen on {addr}: another process holds the port (or the host is not "
            f"local); pass another --port, or 0 for a free one"
        )
    svc = SyncerService(
        cfg,
        run_dir,
        address=f"{host}:{bound}",
        exit_on_finish=exit_on_finish,
        secret=token or None,
        metrics=metrics,
        start_fresh=start_fresh,
    )
    holder["svc"] = svc
    svc.pools = pools
    pbg.add_SyncerServicer_to_server(svc, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, svc, bound


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer.syncer", description=__doc__.split("\n")[0])
    add_config_arguments(ap)
    ap.add_argument("--run-dir", required=True, help="events/, checkpoints/ and syncer.json go here")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port (written to RUN_DIR/syncer.json)")
    ap.add_argument("--token-file", help="file holding the shared token (else $DILOCO_TOKEN)")
    ap.add_argument("--insecure-no-auth", action="store_true", help="accept calls without a token (tests only)")
    ap.add_argument("--tls-cert"), ap.add_argument("--tls-key")
    ap.add_argument(
        "--no-exit-on-finish", action="store_true", help="keep serving after the token budget is reached"
    )
    ap.add_argument(
        "--start-fresh",
        action="store_true",
        help="where checkpoints are there and none can be restored, train from the beginning (versions start above "
        "theirs) instead of refusing to start",
    )
    add_metrics_arguments(ap)
    args = ap.parse_args(argv)
    cfg = config_from_arguments(args)
    token = Path(args.token_file).read_text().strip() if args.token_file else os.environ.get("DILOCO_TOKEN")
    if not token and not args.insecure_no_auth:
        print(
            "error: no shared token: pass --token-file or set DILOCO_TOKEN (or --insecure-no-auth for tests)",
            file=sys.stderr,
        )
        return 2
    run_dir = Path(args.run_dir)
    metrics = expose(args, run_dir, "syncer", "syncer", num_fragments=cfg.algorithm.num_fragments)
    try:
        server, svc, port = serve(
            cfg,
            run_dir,
            host=args.host,
            port=args.port,
            token=token or None,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            metrics=metrics,
            start_fresh=args.start_fresh,
        )
    except AddressInUse as err:
        print(f"error: {err}", file=sys.stderr)
        return AddressInUse.EXIT_CODE
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    info = run_dir / "syncer.json"
    tmp = info.with_suffix(".json.tmp")
    tmp.write_text(
        json.dumps({"address": f"{args.host}:{port}", "pid": os.getpid(), "incarnation": svc.incarnation})
    )
    os.replace(tmp, info)
    stop = threading.Event()
    why = ["signal"]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    over_since: float | None = None  # the result is fixed (final eval written) and training is over
    while not stop.wait(EXIT_POLL_S):
        if svc.done.is_set() and svc.stopped() and not args.no_exit_on_finish:
            over_since = over_since if over_since is not None else svc.clock()
            if svc.exit_due(over_since):  # learners collected their stop signal and left, or are dead
                why[0] = "finished"
                break
    svc.shutdown(why[0])
    server.stop(grace=1.0).wait(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
