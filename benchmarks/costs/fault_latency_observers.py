"""benchmarks.costs.fault_latency, the observers: threads polling real processes, the syncer's Status and probe calls
through each learner's Toxiproxy link."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.costs.fault_latency_plan import KINDS, PROBE_DEADLINE_S, Slot
from benchmarks.costs.fault_latency_reading import ProbeSample, ProcState, StatusSample, proc_class
from chaos.history import FaultOp, Phase, parse_record
from faults import procfs
from faults.base import SYNCER

PROC_POLL_S = 0.002
STATUS_POLL_S = 0.02
PROBE_GAP_S = 0.001
# The probe's channel: gRPC's own retries off (a raw observation), no connection sharing with other channels.
PROBE_OPTIONS: list[tuple[str, int]] = [("grpc.enable_retries", 0), ("grpc.use_local_subchannel_pool", 1)]


# ---- the observers (threads; real processes and sockets) -----------------------------------------------------


class Observer:
    """The three observers of the module docstring, attached to the run's LocalBackend when it is created."""

    def __init__(self, slots: Sequence[Slot]) -> None:
        self.slots = list(slots)
        self.backend: Any = None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.changes: dict[str, list[ProcState]] = {}
        self.proc_gaps: list[float] = []
        self.proc_last = 0.0
        self.status: list[StatusSample] = []
        self.probes: dict[str, list[ProbeSample]] = {}  # fault id -> its window's calls
        self.steady: float | None = None
        self.heal_invoked: dict[str, float] = {}  # fault id -> heal invoke time, from controller.jsonl
        self._records_at = 0  # bytes of controller.jsonl read so far
        self.errors: list[str] = []

    def attach(self, backend: Any) -> None:
        """Start watching ``backend`` (called from the backend factory, before bring-up)."""
        self.backend = backend
        units = [SYNCER, *backend.learners()]
        self.changes = {u: [] for u in units}
        for name, fn in (("proc", self._proc_loop), ("status", self._status_loop), ("probe", self._probe_loop)):
            th = threading.Thread(target=self._guard, args=(name, fn), name=f"observer-{name}", daemon=True)
            self.threads.append(th)
            th.start()

    def close(self) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(PROBE_DEADLINE_S + 2.0)

    def _guard(self, name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - reported in the results, never kills the run
            self.errors.append(f"{name}: {type(err).__name__}: {err}")

    # proc: /proc/<pid>/stat of each unit's current process, changes only
    def _proc_loop(self) -> None:
        procs = self.backend.procs.procs  # name -> Popen; a restart replaces the entry
        last: dict[str, tuple[int | None, str]] = {}
        prev = None
        while not self.stop.is_set():
            t = time.time()
            for unit in self.changes:
                p = procs.get(unit)
                pid = p.pid if p is not None else None
                key = (pid, proc_class(procfs.stat_text(pid)) if pid is not None else "dead")
                if last.get(unit) != key:
                    last[unit] = key
                    self.changes[unit].append(ProcState(t, *key))
            if prev is not None:
                self.proc_gaps.append(t - prev)
            prev = self.proc_last = t
            self.stop.wait(PROC_POLL_S)

    # status: the syncer's Status on its own address
    def _status_loop(self) -> None:
        from trainer.proto import diloco_pb2 as pb

        b = self.backend
        metadata = (("authorization", f"Bearer {b.procs.token}"),)
        prober = _Prober(f"127.0.0.1:{b.port}", "status", metadata)
        try:
            while not self.stop.is_set():
                if prober.address != f"127.0.0.1:{b.port}":  # the port is chosen at bring-up, after attach
                    prober.close()
                    prober = _Prober(f"127.0.0.1:{b.port}", "status", metadata)
                t0 = time.time()
                try:
                    r = prober.stub.Status(pb.StatusRequest(), timeout=0.3, metadata=metadata)
                    s = StatusSample(
                        t0,
                        time.time(),
                        True,
                        r.syncer_incarnation,
                        {lr.learner_id: lr.incarnation for lr in r.learners},
                        int(r.rejections.get("non_finite", 0)),
                    )
                except Exception:  # noqa: BLE001 - grpc.RpcError: the syncer is down or starting
                    s = StatusSample(t0, time.time(), False)
                    prober.reset()  # a fresh channel: no reconnect backoff in the numbers
                self.status.append(s)
                self.stop.wait(STATUS_POLL_S)
        finally:
            prober.close()

    def _read_records(self) -> None:
        """New lines of controller.jsonl: the steady time and heal invokes (when to stop watching, not what)."""
        path = Path(self.backend.run_dir) / "controller.jsonl"
        if not path.exists():
            return
        with open(path, "rb") as f:
            f.seek(self._records_at)
            data = f.read()
        done = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self._records_at += done
        for line in data[:done].decode().splitlines():
            r = parse_record(line)
            if isinstance(r, Phase) and r.name == "steady":
                self.steady = r.ts
            elif isinstance(r, FaultOp) and r.action == "heal" and r.outcome == "invoke":
                self.heal_invoked.setdefault(r.fault_id, r.ts)

    # probe: from each network slot's start until its heal + the recovery it needs, Status through the proxy
    def _probe_loop(self) -> None:
        while (
            self.steady is None and not self.stop.is_set()
        ):  # fault schedule times count from the controller's steady
            self._read_records()
            self.stop.wait(0.05)
        metadata = (("authorization", f"Bearer {self.backend.procs.token}"),)
        for slot in self.slots:
            spec = KINDS[slot.kind]
            if not spec.network or self.stop.is_set():
                continue
            assert self.steady is not None
            start = self.steady + slot.start_s
            # Until the heal (as late as the controller makes it) plus time to see recovery; a cap if never healed.
            tail, cap = spec.stable_s + 0.5, self.steady + slot.end_s + 30.0
            self.stop.wait(max(0.0, start - time.time()))
            address = f"127.0.0.1:{self.backend.proxy_ports[slot.target]}"
            samples = self.probes.setdefault(slot.fault_id, [])
            prober = _Prober(address, spec.probe_rpc, metadata)
            next_read = 0.0
            try:
                while not self.stop.is_set():
                    now = time.time()
                    if now >= next_read:
                        self._read_records()
                        next_read = now + 0.05
                    healed = self.heal_invoked.get(slot.fault_id)
                    if now >= cap or (healed is not None and now >= healed + tail):
                        break
                    t0 = time.time()
                    try:
                        size = prober.call(spec.deadline_s)
                        samples.append(ProbeSample(t0, time.time(), "OK", size))
                    except Exception as err:  # noqa: BLE001 - grpc.RpcError; its code is the observation
                        code = err.code().name if hasattr(err, "code") else type(err).__name__
                        samples.append(ProbeSample(t0, time.time(), code))
                        prober.reset()
                    time.sleep(PROBE_GAP_S)
            finally:
                prober.close()


class _Prober:
    """One gRPC channel to ``address`` and the call a probe makes on it (``rpc``: "health" or "status")."""

    channel: Any  # a grpc.Channel (grpc is imported where it is used); set by reset

    def __init__(self, address: str, rpc: str, metadata: tuple[tuple[str, str], ...]) -> None:
        self.address, self.rpc, self.metadata = address, rpc, metadata
        self.reset()

    def reset(self) -> None:
        """A fresh channel (after a failure: gRPC's reconnect backoff would otherwise be in the numbers)."""
        import grpc
        from grpc_health.v1 import health_pb2_grpc

        from trainer.proto import diloco_pb2_grpc as pbg

        if getattr(self, "channel", None) is not None:
            self.channel.close()
        self.channel = grpc.insecure_channel(self.address, options=PROBE_OPTIONS)
        self.stub = pbg.SyncerStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def call(self, deadline_s: float) -> int:
        """One call; the size of its reply. Raises grpc.RpcError."""
        from grpc_health.v1 import health_pb2

        from trainer.proto import diloco_pb2 as pb

        if self.rpc == "health":
            return self.health.Check(health_pb2.HealthCheckRequest(), timeout=deadline_s).ByteSize()
        return self.stub.Status(pb.StatusRequest(), timeout=deadline_s, metadata=self.metadata).ByteSize()

    def close(self) -> None:
        self.channel.close()
