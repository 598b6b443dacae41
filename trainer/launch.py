"""Start a syncer and M learner processes on loopback, train to the token budget, write a run directory.

Run directory layout::

    RUN_DIR/
      config.yaml      the resolved run config (every process reads this file)
      seeds.json       every seed the run derives, for replay
      syncer.json      the syncer's address and pid (written by the syncer)
      events/*.jsonl   one event log per process (schema: trainer.events)
      logs/*.log       stdout/stderr of every process
      checkpoints/     the syncer's atomic checkpoints
      final.npz        the final global checkpoint (the one at the token budget)
      metrics.json     summary: final eval loss, loss floor, merges, tokens, goodput
      metrics/*.json   where each process serves Prometheus /metrics (file_sd targets; trainer.telemetry)

Example:
    python -m trainer.launch --config configs/tiny-decoupled.yaml --run-dir runs/demo

:class:`LocalCluster` is the reusable part: the chaos controller drives the same
processes (kill, restart, pause) through it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from trainer.checkpoint import result_checkpoint
from trainer.client import SyncClient
from trainer.config import RunConfig, add_config_arguments, config_from_arguments, learner_ids
from trainer.core.credentials import learner_credential
from trainer.errors import AddressInUse, TrainerError
from trainer.lifeline import guarded
from trainer.metrics import RunMetrics, summarize_run
from trainer.training import learner_seed_index

# Several JAX processes share two cores: one thread each, or they thrash.
THREAD_ENV: dict[str, str] = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "JAX_PLATFORMS": "cpu",
    "PYTHONUNBUFFERED": "1",
}


def see_log(path: Path, lines: int = 12) -> str:
    """``see PATH`` plus the log's last lines, so an error in CI output shows its cause without the file.

    >>> see_log(Path("/nonexistent/syncer.log"))
    'see /nonexistent/syncer.log'
    """
    try:
        tail = path.read_bytes()[-8192:].decode("utf-8", "replace").splitlines()[-lines:]
    except OSError:
        tail = []
    body = "".join(f"\n    | {line}" for line in tail if line.strip())
    return f"see {path}" + (f"; its last lines:{body}" if body else "")


def prepare_run_dir(config: RunConfig, run_dir: Path) -> None:
    """The run directory's skeleton: events/, logs/, checkpoints/, metrics/, the resolved config and every seed."""
    for sub in ("events", "logs", "checkpoints", "metrics"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(config.to_yaml())
    seeds = {
        "seed": config.seed,
        "init_seed": config.seed,
        "data_seed": config.seed,
        "learner_stream_keys": {
            lid: learner_seed_index(lid) for lid in learner_ids(config.algorithm.num_learners)
        },
        "config_hash": config.config_hash(),
    }
    (run_dir / "seeds.json").write_text(json.dumps(seeds, indent=2))


@dataclass
class LocalCluster:
    """A syncer and learners as child processes of this one, all in their own process groups."""

    config: RunConfig
    run_dir: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    python: str = sys.executable
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    syncer_address: str = ""
    learner_nice: int = 0  # > 0 lowers learners' CPU priority below the syncer's
    metrics: bool = True  # every process serves /metrics on a free port, announced in RUN_DIR/metrics/ (telemetry)
    # A learner's command prefix by id, e.g. to run it in a network namespace (faults.netns); None: none.
    prefix: Callable[[str], list[str]] | None = None

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        prepare_run_dir(self.config, self.run_dir)

    def _env(self, token: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(THREAD_ENV)
        env["DILOCO_TOKEN"] = token
        root = str(Path(__file__).resolve().parent.parent)
        # A persistent compilation cache: a restarted process (the point of chaos runs) skips most of
        # its JIT compile. Measured, tiny model, idle machine: first step 1.9 s cold, 0.45 s cached.
        env.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(root) / ".cache" / "jax"))
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def _spawn(self, name: str, args: list[str], nice: int = 0, token: str | None = None) -> subprocess.Popen:
        """Start ``name``; it authenticates with ``token`` (default: the shared secret, for the syncer)."""
        old = self.procs.get(name)
        if old is not None and old.poll() is None:
            raise TrainerError(f"{name} is already running (pid {old.pid}); stop it first")
        log = open(self.run_dir / "logs" / f"{name}.log", "ab")
        # Dies with this process, even by SIGKILL, so nothing is orphaned (trainer.lifeline).
        before = self.prefix(name) if self.prefix is not None and name != "syncer" else []
        proc = subprocess.Popen(
            guarded([*before, self.python, *args], os.getpid(), nice),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(self.token if token is None else token),
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def _metrics_args(self) -> list[str]:
        return ["--metrics-port", "0"] if self.metrics else []

    def start_syncer(self, port: int = 0, timeout_s: float = 60.0, host: str = "127.0.0.1") -> str:
        info = self.run_dir / "syncer.json"
        info.unlink(missing_ok=True)
        proc = self._spawn(
            "syncer",
            [
                "-m",
                "trainer.syncer",
                "--config",
                str(self.run_dir / "config.yaml"),
                "--run-dir",
                str(self.run_dir),
                "--host",
                host,
                "--port",
                str(port),
                *self._metrics_args(),
            ],
        )
        deadline = time.monotonic() + timeout_s
        log = self.run_dir / "logs" / "syncer.log"
        while not info.exists():
            if proc.poll() is not None:
                if proc.returncode == AddressInUse.EXIT_CODE:
                    raise AddressInUse(f"the syncer could not listen on port {port}; see {log}")
                raise TrainerError(f"syncer exited with {proc.returncode}; {see_log(log)}")
            if time.monotonic() > deadline:
                raise TrainerError(f"syncer did not start within {timeout_s}s; {see_log(log)}")
            time.sleep(0.05)
        self.syncer_address = json.loads(info.read_text())["address"]
        return self.syncer_address

    def start_learner(
        self,
        learner_id: str,
        address: str | None = None,
        extra_sets: list[str] | None = None,
        corrupt: str | None = None,
    ) -> subprocess.Popen:
        """Start a learner talking to ``address`` (default: the syncer; the chaos harness passes its proxy)."""
        args = [
            "-m",
            "trainer.learner",
            "--config",
            str(self.run_dir / "config.yaml"),
            "--id",
            learner_id,
            "--syncer",
            address or self.syncer_address,
            "--run-dir",
            str(self.run_dir),
            *self._metrics_args(),
        ]
        for s in extra_sets or []:
            args += ["--set", s]
        if corrupt:
            args += ["--corrupt", corrupt]
        # Its own credential, not the shared secret: it can act as this learner id only (trainer.core.credentials).
        return self._spawn(
            learner_id, args, nice=self.learner_nice, token=learner_credential(self.token, learner_id)
        )

    def client(self, timeout_s: float = 5.0) -> SyncClient:
        return SyncClient(self.syncer_address, self.token, timeout_s=timeout_s)

    def signal(self, name: str, sig: int) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, sig)

    def kill(self, name: str) -> None:
        """SIGKILL the process and reap it."""
        self.signal(name, signal.SIGKILL)
        self.procs[name].wait(10)

    def alive(self, name: str) -> bool:
        p = self.procs.get(name)
        return p is not None and p.poll() is None

    def stop_all(self, grace_s: float = 10.0) -> dict[str, int | None]:
        """SIGCONT + SIGTERM everyone, then SIGKILL stragglers; returns exit codes. Always leaves no child behind."""
        for p in self.procs.values():
            if p.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + grace_s
        for p in self.procs.values():
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        return {n: p.returncode for n, p in self.procs.items()}

    def finalize(self, exit_codes: dict[str, int | None] | None = None) -> Path | None:
        """Copy the run's result checkpoint (at the budget, else the newest) to final.npz; write metrics.json (with
        the processes' exit codes when given)."""
        result = result_checkpoint(self.run_dir / "checkpoints")
        final = None
        if result is not None:
            final = self.run_dir / "final.npz"
            shutil.copyfile(result, final)
        summarize_run(self.run_dir).model_copy(update={"exit_codes": exit_codes or {}}).write(
            self.run_dir / "metrics.json"
        )
        return final


def train(config: RunConfig, run_dir: Path, *, timeout_s: float = 1800.0, progress: bool = True) -> RunMetrics:
    """Run the whole job on loopback; returns metrics. Children are always cleaned up."""
    cluster = LocalCluster(config, run_dir)
    try:
        cluster.start_syncer()
        ids = learner_ids(config.algorithm.num_learners)
        for lid in ids:
            cluster.start_learner(lid)
        deadline = time.monotonic() + timeout_s
        last = 0.0
        with cluster.client() as client:
            while cluster.alive("syncer"):
                if time.monotonic() > deadline:
                    raise TrainerError(f"run did not finish within {timeout_s}s; see {run_dir}/logs")
                if progress and time.monotonic() - last > 2.0:
                    last = time.monotonic()
                    try:
                        st = client.status()
                        print(
                            f"tokens {st.tokens}/{st.token_budget}  merges {st.merges}  "
                            f"eval {st.eval_loss:.4f} (floor {st.loss_floor:.4f})",
                            flush=True,
                        )
                    except (TrainerError, grpc.RpcError):  # e.g. CANCELLED while the syncer shuts down
                        pass
                time.sleep(0.2)
        for lid in ids:
            cluster.procs[lid].wait(30)
    finally:
        codes = cluster.stop_all()
    cluster.finalize(codes)
    return RunMetrics.read(run_dir / "metrics.json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer.launch", description=__doc__.split("\n")[0])
    add_config_arguments(ap)
    ap.add_argument("--run-dir", help="where to write the run (default runs/<time>)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    args = ap.parse_args(argv)
    cfg = config_from_arguments(args)
    # SIGTERM unwinds like Ctrl-C, so train()'s cleanup runs on both; SIGINT is reinstated because
    # a shell's background job starts with it ignored, and Ctrl-C must always clean up.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run_dir = Path(args.run_dir or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    if run_dir.exists() and any(run_dir.iterdir()):
        print(f"error: {run_dir} is not empty; choose a new --run-dir", file=sys.stderr)
        return 2
    try:
        m = train(cfg, run_dir, timeout_s=args.timeout)
    except TrainerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted; every process was stopped. Partial run: {run_dir}", file=sys.stderr)
        return 130
    print(
        json.dumps(
            m.model_dump(
                mode="json", include={"final_eval_loss", "loss_floor", "merges", "tokens_total", "wall_s"}
            ),
            indent=2,
        )
    )
    print(f"run directory: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
