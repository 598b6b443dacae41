"""Helpers for tests: polling with a deadline, a run's processes, a fake cluster for fault tests, free ports, small
run configs, a syncer served in-process."""

from __future__ import annotations

import dataclasses
import socketserver
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from faults import procfs
from faults.toxiproxy import Toxiproxy
from trainer.config import RunConfig, build_config
from trainer.core.algorithm import Algorithm
from trainer.core.syncer_policy import SyncerPolicy

T = TypeVar("T")


def wait_until(pred: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.2) -> T:
    """Poll ``pred`` until it returns something truthy; fail the test naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    last_err: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
        except Exception as err:  # noqa: BLE001 - transient (e.g. syncer restarting); report the last one
            last_err = err
        time.sleep(interval_s)
    raise AssertionError(
        f"timed out after {timeout_s}s waiting for {what}" + (f" (last error: {last_err})" if last_err else "")
    )


def run_processes(run_dir: Path) -> dict[int, str]:
    """The live processes started with ``--run-dir run_dir``, by pid: which unit each is (``--id``, else the
    syncer).

    Read from /proc (:mod:`faults.procfs`), not from the run's own records: a learner frozen while it sets up JAX
    has written no LearnerStart yet, and a check that found processes only by their events would not see it.
    """
    found = procfs.find(lambda argv: any(a == "--run-dir" and b == str(run_dir) for a, b in zip(argv, argv[1:])))
    return {pid: argv[argv.index("--id") + 1] if "--id" in argv else "syncer" for pid, argv in found.items()}


@contextmanager
def served_syncer(cfg: RunConfig, run_dir: Path, **serve_kw: Any) -> Iterator[tuple[Any, int]]:
    """A real syncer (trainer.syncer.serve) on a free loopback port: yields (service, port); always stopped."""
    from trainer.syncer import serve

    server, svc, port = serve(cfg, run_dir, host="127.0.0.1", port=0, **serve_kw)
    try:
        yield svc, port
    finally:
        svc.shutdown("test over")
        server.stop(0).wait(5)


def raw_upload(svc: Any, learner_id: str, c_steps: int, tokens_per_step: int) -> tuple[dict[str, Any], Any, bytes]:
    """A small update of fragment 0 from base 0 in round 0 by ``learner_id`` (incarnation ``i``) to the served syncer
    ``svc``: (its tensors, the ``UploadHeader`` a raw Upload stream starts with, the encoded body), for tests that
    send the body's pieces when they choose."""
    import numpy as np

    from trainer.client import specs_to_pb
    from trainer.proto import diloco_pb2 as pb
    from trainer.wire import crc32, encode_tensors

    update = {n: np.full_like(svc.state.params[n], -1e-4) for n in svc.fragments[0].names}
    specs, data = encode_tensors(update)
    header = pb.UploadHeader(
        learner_id=learner_id,
        incarnation="i",
        fragment=0,
        base_version=0,
        c_steps=c_steps,
        c_tokens=c_steps * tokens_per_step,
        tensors=specs_to_pb(specs),
        total_bytes=len(data),
        crc32=crc32(data),
        round=0,
    )
    return update, header, data


def tiny_config(**overrides: object) -> RunConfig:
    """A tiny-model config; ``overrides`` are dotted keys, e.g. ``{"algorithm.num_learners": 1}``."""
    sets = [f"{k}={v}" for k, v in overrides.items()]
    return build_config({"model": {"size": "tiny"}}, "<test>", sets)


class _NoToxiproxy:
    """The ``toxiproxy`` of a :class:`FakeCluster` given none: a fault that uses it fails the test (a process fault
    must never touch the network side)."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a fault used toxiproxy.{name} of a cluster that has no network side")


@dataclass(eq=False)
class FakeCluster:
    """A :class:`faults.base.Cluster` for fault tests: what a test gives it works; any other use fails the test.

    ``client`` (a real Toxiproxy client) with each learner's proxy name in ``proxies`` (and its listen port in
    ``ports``): network faults. ``sent`` (a list): every signal a fault sends is recorded there. Processes: none
    here; tests/integration/test_process_faults.py's ProcCluster extends it with real ones.
    """

    learner_ids: list[str]
    client: Toxiproxy | None = None
    proxies: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    sent: list[tuple[str, int]] | None = None

    def learners(self) -> list[str]:
        return list(self.learner_ids)

    @property
    def toxiproxy(self) -> Toxiproxy:
        return self.client if self.client is not None else cast(Toxiproxy, _NoToxiproxy())

    def proxy(self, learner_id: str) -> str:
        assert learner_id in self.proxies, f"proxy() asked for unknown learner {learner_id!r}"
        return self.proxies[learner_id]

    def alive(self, unit: str) -> bool:
        raise AssertionError(f"a fault asked whether {unit} is alive, of a cluster that has no processes")

    def signal(self, unit: str, sig: int) -> bool:
        assert self.sent is not None, f"a fault sent signal {sig} to {unit}, in a cluster that has no processes"
        self.sent.append((unit, sig))
        return True

    def start(self, unit: str, *, corrupt: str | None = None) -> None:
        raise AssertionError(f"a fault started {unit}, in a cluster that has no processes")

    def stop(self, unit: str, timeout_s: float = 10.0) -> None:
        raise AssertionError(f"a fault stopped {unit}, in a cluster that has no processes")


class EchoHandler(socketserver.BaseRequestHandler):
    """A TCP upstream for proxy tests: sends back whatever it receives until the peer closes."""

    def handle(self) -> None:
        while True:
            try:
                data = self.request.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.request.sendall(data)


def assert_result_at_budget(verdicts: Any) -> None:
    """The ledger check judged the run's result at the budget (fixed within its allowance beyond it) and passed."""
    ledger = next(v for v in verdicts if v.name == "ledger")
    assert ledger.status == "pass" and ledger.evidence["budget"], ledger


def syncer_policy(num_fragments: int = 1, **settings: Any) -> SyncerPolicy:
    """A :class:`SyncerPolicy` for the core's unit and property tests, from one flat list of settings: the
    algorithm's (by their config names) and the syncer's own. Algorithm settings not given keep the small fixed
    values these tests were written for (one fragment, no grace, τ 2, no staleness), not the decoupled preset.

    >>> p = syncer_policy(num_learners=2, min_quorum=2, token_budget=10)
    >>> (p.algorithm.min_quorum, p.algorithm.grace, p.token_budget)
    (2, False, 10)
    """
    own = {f.name for f in dataclasses.fields(SyncerPolicy)} - {"algorithm"}
    algorithm = {"grace": False, "overlap_steps": 2, "max_staleness": 0, "num_fragments": num_fragments}
    algorithm.update({k: v for k, v in settings.items() if k not in own})
    return SyncerPolicy(algorithm=Algorithm(**algorithm), **{k: v for k, v in settings.items() if k in own})
