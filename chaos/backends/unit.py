"""Entrypoint of a syncer or learner container: wait for the controller's plan, then become the process.

The compose file starts the syncer's container with ``python -m chaos.backends.unit syncer`` and each of the
``learner`` service's replicas (``DILOCO_LEARNERS`` of them) with ``… unit learner``. The container backend
writes ``/runs/.active.json`` (which run directory, the shared token, each learner's proxy address, which
learner to start corrupt, which container is which learner) before it (re)starts a unit. This waits for that
file to name the unit — a learner replica finds its id under its own host name — then ``exec``s the trainer
process, so the trainer is PID 1 and receives the signals faults send to the container (SIGKILL, SIGSTOP,
SIGTERM) directly.

A unit the active run does not use (a 4th learner when a scenario trains 3)
waits, idle, until the controller stops it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chaos.container_probe import METRICS_PORT  # every unit serves /metrics there (observability profile)
from trainer.core.credentials import learner_credential

ACTIVE = Path(os.environ.get("DILOCO_ACTIVE", "/runs/.active.json"))
SYNCER_PORT = 50051
UNIT_UID = 1000  # the image's unprivileged user (docker/Dockerfile), as which every unit runs
LEARNER_SERVICE = "learner"  # the learners' one service (compose) or StatefulSet (Kubernetes): replicas of it


@dataclass
class LearnerSlot:
    """How one learner of the run starts: the address it dials (its proxy) and the corruption it trains with."""

    syncer: str  # host:port
    corrupt: str | None = None  # a trainer.learner --corrupt mode; None: honest


@dataclass
class ActiveRun:
    """What the controller tells every unit about the run in progress (JSON, never pickle)."""

    run_dir: str
    token: str
    learners: dict[str, LearnerSlot] = field(default_factory=dict)  # by learner id
    hosts: dict[str, str] = field(default_factory=dict)  # a learner replica's host name -> its learner id

    def to_json(self) -> str:
        return json.dumps(
            {
                "run_dir": self.run_dir,
                "token": self.token,
                "learners": {lid: asdict(slot) for lid, slot in self.learners.items()},
                "hosts": self.hosts,
            },
            indent=2,
        )

    @classmethod
    def read(cls, path: Path = ACTIVE) -> ActiveRun | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # absent, or being replaced this instant: ask again
        learners = {lid: LearnerSlot(**slot) for lid, slot in data.get("learners", {}).items()}
        return cls(data["run_dir"], data["token"], learners, data.get("hosts", {}))

    def unit_of(self, service: str, hostname: str) -> str | None:
        """Which unit a container of ``service`` is: the syncer, or the learner its host name was given."""
        return self.hosts.get(hostname) if service == LEARNER_SERVICE else service

    def write(self, path: Path = ACTIVE) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        os.chmod(tmp, 0o644)  # units run as another user than the controller
        os.replace(tmp, path)


def retire(run: ActiveRun, path: Path = ACTIVE) -> str | None:
    """Remove ``path`` while it still names ``run`` (its directory and token); what went wrong, if anything.

    A controller does this when its run is over. Left on the ``runs`` volume (the main job keeps the volume for
    its cached baselines), the file would have the next deployment's units start that run again before any
    controller came; when its syncer then exits at once (seen after a syncer crashed near a baseline's end),
    compose finds the syncer unhealthy and never starts the controller: every later main job failed in seconds.
    A file naming another run is that run's controller's to remove.
    """
    found = ActiveRun.read(path)
    if found is None or (found.run_dir, found.token) != (run.run_dir, run.token):
        return None
    try:
        path.unlink()
    except OSError as err:
        return f"removing {path}: {err}"
    return None


def command(unit: str, run: ActiveRun) -> list[str] | None:
    """The trainer command line for ``unit`` in ``run``; None when the run does not use this unit."""
    config = str(Path(run.run_dir) / "config.yaml")
    metrics = ["--metrics-host", "0.0.0.0", "--metrics-port", str(METRICS_PORT)]
    if unit == "syncer":
        return [
            sys.executable,
            "-m",
            "trainer.syncer",
            "--config",
            config,
            "--run-dir",
            run.run_dir,
            "--host",
            "0.0.0.0",
            "--port",
            str(SYNCER_PORT),
            *metrics,
        ]
    slot = run.learners.get(unit)
    if slot is None:
        return None
    cmd = [
        sys.executable,
        "-m",
        "trainer.learner",
        "--config",
        config,
        "--id",
        unit,
        "--syncer",
        slot.syncer,
        "--run-dir",
        run.run_dir,
        *metrics,
    ]
    if slot.corrupt:
        cmd += ["--corrupt", slot.corrupt]
    return cmd


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ("syncer", "learner"):
        print("usage: python -m chaos.backends.unit syncer|learner", file=sys.stderr)
        return 2
    host = socket.gethostname()
    while True:
        run = ActiveRun.read()
        unit = run.unit_of(args[0], host) if run is not None else None
        cmd = command(unit, run) if run is not None and unit is not None else None
        if run is not None and cmd is not None and (Path(run.run_dir) / "config.yaml").exists():
            break
        time.sleep(0.5)
    assert unit is not None  # cmd is built only for a unit
    # A learner gets its own credential (it can act as this id only); the syncer the shared secret.
    os.environ["DILOCO_TOKEN"] = run.token if unit == "syncer" else learner_credential(run.token, unit)
    print(f"{unit}: {' '.join(cmd)}", flush=True)  # stdout is the container log; the backend collects it
    os.execv(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
