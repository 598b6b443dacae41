"""The container backend: the compose deployment's syncer and learner containers, driven through the Docker API.

The compose file (``docker-compose.yml``) defines the units — ``syncer`` and the ``learner`` service's
``DILOCO_LEARNERS`` replicas (unit ``learner-i`` is replica i + 1) — on two private networks: learners and
Toxiproxy on ``edge``, the syncer and Toxiproxy on ``core``, so a learner can reach the syncer
only through its proxy. Every unit
runs :mod:`chaos.backends.unit`, which waits for ``/runs/.active.json`` and then
becomes the trainer process. This backend owns the lifecycle:

    bring_up   stop every unit, prepare a work directory on the shared ``runs``
               volume, write the config and ``.active.json``, create one proxy per
               learner (``toxiproxy:26000+i`` → ``syncer:50051``), start the syncer,
               wait until its gRPC health service says SERVING, start the learners
    faults     signals through ``docker kill --signal`` (the trainer is PID 1),
               start / stop of containers; Toxiproxy faults act on the proxies
    teardown   delete this run's proxies, stop every unit (SIGCONT first: a
               SIGSTOPped trainer cannot handle SIGTERM), collect every container's
               log and the trainer's events into the run directory, remove
               ``.active.json`` (a later deployment's units must not start this run)
               and the work directory

It works from inside the compose network (the ``controller`` service) and from
the host (as root: the ``runs`` volume is read at its mountpoint and containers
are reached at their bridge addresses).

Example:
    opts.backend = docker_backend_factory(DockerDeployment(Deployment(project="diloco-chaos")))
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.backends import ProxiedUnits
from chaos.backends.unit import LEARNER_SERVICE, SYNCER_PORT, UNIT_UID, ActiveRun, LearnerSlot, retire
from chaos.errors import RunError
from chaos.history import Teardown
from faults.base import SYNCER
from faults.errors import TargetError
from faults.toxiproxy import ProxySpec, Toxiproxy
from trainer.checkpoint import result_checkpoint
from trainer.client import RetryPolicy, SyncClient
from trainer.config import RunConfig
from trainer.healthcheck import serving
from trainer.launch import prepare_run_dir
from trainer.metrics import summarize_run

PROXY_BASE_PORT = 26000
CONTAINER_NUMBER = "com.docker.compose.container-number"  # learner-i is replica i + 1 of LEARNER_SERVICE
RUNNING = ("running", "paused", "restarting")


@dataclass(frozen=True)
class Deployment:
    """Where the compose deployment is and how this process reaches it."""

    project: str = "diloco-chaos"
    in_network: bool = False  # True inside the compose network (the controller service)
    runs_in_container: str = "/runs"  # the runs volume as the units see it

    @classmethod
    def from_env(cls) -> Deployment:
        return cls(
            project=os.environ.get("DILOCO_COMPOSE_PROJECT", "diloco-chaos"),
            in_network=os.environ.get("DILOCO_IN_COMPOSE") == "1",
        )


class DockerDeployment:
    """Docker API access to one compose project: its containers, its runs volume, its addresses."""

    def __init__(self, dep: Deployment) -> None:
        try:
            import docker  # the optional [docker] extra
        except ImportError:
            raise RunError("the docker backend needs the Docker SDK: pip install 'diloco-chaos[docker]'") from None
        self.dep = dep
        try:
            self.api = docker.from_env(timeout=30)
            self.api.ping()
        except Exception as err:  # noqa: BLE001 - docker raises several unrelated types here
            hint = (
                "the controller container needs the socket's group: DOCKER_GID=$(stat -c %g "
                "/var/run/docker.sock) docker compose ..."
                if dep.in_network
                else "is it running?"
            )
            raise RunError(f"cannot reach the Docker daemon ({err}); {hint}") from None

    def container(self, unit: str) -> Any:
        """The container of a service, or of a learner: ``learner-i`` is replica i + 1 of the ``learner`` service."""
        service, number = _service_of(unit)
        labels = [f"com.docker.compose.project={self.dep.project}", f"com.docker.compose.service={service}"]
        if number is not None:
            labels.append(f"{CONTAINER_NUMBER}={number}")
        found = self.api.containers.list(all=True, filters={"label": labels})
        if not found:
            raise TargetError(
                f"no container for {unit!r} in compose project {self.dep.project!r}; start the "
                "deployment with `docker compose up` (DILOCO_LEARNERS=N runs N learner replicas)"
            )
        return found[0]

    def services(self) -> list[str]:
        """The units and services of the project: ``learner-i`` for each learner replica, else the service name."""
        found = self.api.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={self.dep.project}"}
        )
        return sorted(_unit_of(c.labels) for c in found)

    def address(self, service: str, port: int) -> str:
        if self.dep.in_network:
            return f"{service}:{port}"
        c = self.container(service)
        c.reload()
        nets = c.attrs["NetworkSettings"]["Networks"]
        ip = next((n["IPAddress"] for n in nets.values() if n.get("IPAddress")), "")
        if not ip:
            raise RunError(f"service {service} has no network address; is it running?")
        return f"{ip}:{port}"

    def runs_local(self) -> Path:
        """The runs volume as this process sees it."""
        if self.dep.in_network:
            return Path(self.dep.runs_in_container)
        vol = self.api.volumes.get(f"{self.dep.project}_runs")
        return Path(vol.attrs["Mountpoint"])

    def stop_others(self, keep: tuple[str, ...] = ("controller", "prometheus")) -> list[str]:
        """Stop every container of the project but ``keep``, so ``docker compose up`` returns after a run.
        Prometheus stays up: its data is there to be looked at after the run (`docker compose down` stops it)."""
        stopped = []
        for c in self.api.containers.list(filters={"label": f"com.docker.compose.project={self.dep.project}"}):
            service = c.labels.get("com.docker.compose.service", "")
            if service not in keep:
                c.stop(timeout=5)
                stopped.append(service)
        return stopped

    def toxiproxy_url(self) -> str:
        return f"http://{self.address('toxiproxy', 8474)}"


def _service_of(unit: str) -> tuple[str, int | None]:
    """``learner-2`` -> (``learner``, 3): the compose service of a unit and its replica number, if a learner.

    >>> _service_of("learner-2"), _service_of("syncer")
    (('learner', 3), ('syncer', None))
    """
    prefix, _, index = unit.rpartition("-")
    if prefix == LEARNER_SERVICE and index.isdigit():
        return LEARNER_SERVICE, int(index) + 1
    return unit, None


def _unit_of(labels: dict[str, str]) -> str:
    """The unit a container is, from its compose labels (the inverse of :func:`_service_of`)."""
    service = labels.get("com.docker.compose.service", "")
    if service == LEARNER_SERVICE and labels.get(CONTAINER_NUMBER, "").isdigit():
        return f"{LEARNER_SERVICE}-{int(labels[CONTAINER_NUMBER]) - 1}"
    return service


def docker_backend_factory(deployment: DockerDeployment) -> Any:
    """A ``RunOptions.backend`` factory bound to one compose deployment."""
    return functools.partial(DockerBackend, deployment=deployment)


class DockerBackend(ProxiedUnits):
    """The compose deployment's containers as a :class:`chaos.backends.Backend`."""

    name = "docker"

    def __init__(
        self, config: RunConfig, run_dir: Path, toxiproxy: Toxiproxy, tag: str, *, deployment: DockerDeployment
    ) -> None:
        super().__init__(config.algorithm.num_learners, toxiproxy, tag)
        self.config = config
        self.run_dir = Path(run_dir)
        self.d = deployment
        missing = [lid for lid in self._ids if lid not in self.d.services()]
        if missing:
            raise RunError(
                f"the scenario trains {len(self._ids)} learners but compose project "
                f"{self.d.dep.project!r} has no container for {missing}; start it with "
                f"DILOCO_LEARNERS={len(self._ids)} (or more), or lower cluster.algorithm.num_learners"
            )
        self.work_local = self.d.runs_local() / "work" / tag
        self.work_in_units = f"{self.d.dep.runs_in_container}/work/{tag}"
        self.active_path = self.d.runs_local() / ".active.json"
        self.active = ActiveRun(
            self.work_in_units,
            secrets.token_hex(16),
            {lid: LearnerSlot(syncer=f"toxiproxy:{PROXY_BASE_PORT + i}") for i, lid in enumerate(self._ids)},
        )
        self.started_at = int(time.time())

    # ---- faults.base.Cluster (learners, toxiproxy, proxy: ProxiedUnits) --------
    def _unit(self, unit: str) -> Any:
        self._known(unit)
        c = self.d.container(unit)
        c.reload()
        return c

    def container(self, unit: str) -> Any:
        """faults.container.ContainerCluster: the unit's container."""
        return self._unit(unit)

    def network(self, unit: str) -> Any:
        """faults.container.ContainerCluster: learners sit on ``edge`` (with Toxiproxy), the syncer on ``core``."""
        return self.d.api.networks.get(f"{self.d.dep.project}_{'core' if unit == SYNCER else 'edge'}")

    def alive(self, unit: str) -> bool:
        return self._unit(unit).status in RUNNING

    def signal(self, unit: str, sig: int) -> bool:
        c = self._unit(unit)
        if c.status not in RUNNING:
            return False
        try:
            c.kill(signal=int(sig))
        except Exception:  # noqa: BLE001 - it died between the check and the signal
            return False
        return True

    def start(self, unit: str, *, corrupt: str | None = None) -> None:
        c = self._unit(unit)
        self._wait_stopped(unit)
        if unit != SYNCER:
            self.active.learners[unit].corrupt = corrupt
            self.active.write(self.active_path)
        c.start()

    def stop(self, unit: str, timeout_s: float = 10.0) -> None:
        c = self._unit(unit)
        if c.status not in RUNNING:
            return
        self.signal(unit, signal.SIGCONT)  # a SIGSTOPped trainer cannot handle SIGTERM
        c.stop(timeout=max(int(timeout_s), 1))

    @property
    def events_dir(self) -> Path:
        return self.work_local / "events"  # copied into the run directory at teardown

    # ---- lifecycle --------------------------------------------------------------
    def bring_up(self) -> None:
        self._stop_units(self.d.services())
        self.work_local.mkdir(parents=True, exist_ok=True)
        prepare_run_dir(self.config, self.work_local)
        self._give_to_units(self.work_local)
        # A learner replica waits for its host name to be given a learner id (chaos.backends.unit).
        self.active.hosts = {self._unit(lid).attrs["Config"]["Hostname"]: lid for lid in self._ids}
        self.active.write(self.active_path)
        self._toxiproxy.populate(
            [
                ProxySpec(
                    name=self.proxy(lid),
                    listen=f"0.0.0.0:{PROXY_BASE_PORT + i}",
                    upstream=f"syncer:{SYNCER_PORT}",
                    enabled=True,
                )
                for i, lid in enumerate(self._ids)
            ]
        )
        self.start(SYNCER)
        deadline = time.monotonic() + 120
        while not serving(self.d.address(SYNCER, SYNCER_PORT), token=self.active.token):  # health, not a sleep
            if not self.alive(SYNCER):
                raise RunError(f"the syncer container exited during start-up: {self._tail_log(SYNCER)}")
            if time.monotonic() > deadline:
                raise RunError("the syncer did not report SERVING within 120 s")
            time.sleep(0.3)
        for lid in self._ids:
            self.start(lid)

    def client(self, timeout_s: float = 0.5) -> SyncClient:
        return SyncClient(
            self.d.address(SYNCER, SYNCER_PORT),
            self.active.token,
            timeout_s=timeout_s,
            retry=RetryPolicy(attempts=1),
        )

    def exit_code(self, unit: str) -> int | None:
        c = self._unit(unit)
        return None if c.status in RUNNING else c.attrs["State"]["ExitCode"]

    def running_units(self) -> list[str]:
        return [u for u in [SYNCER, *self._ids] if self.alive(u)]

    def teardown(self) -> Teardown:
        problems = self._delete_proxies()
        codes: dict[str, int | None] = {}
        for unit in [*self._ids, SYNCER]:
            try:
                self.stop(unit)
                codes[unit] = self.exit_code(unit)
            except Exception as err:  # noqa: BLE001 - teardown never raises; it reports
                problems.append(f"stopping {unit}: {err}")
        self._collect(problems)
        self._retire_active(problems)
        self._remove_work(problems)
        return Teardown(exit_codes=codes, problems=problems)

    def __enter__(self) -> DockerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    # ---- helpers -------------------------------------------------------------------
    def _stop_units(self, services: list[str]) -> None:
        for svc in services:
            if svc == SYNCER or svc.startswith("learner-"):
                c = self.d.container(svc)
                c.reload()
                if c.status in RUNNING:
                    if c.status == "paused":
                        c.unpause()
                    c.kill(signal=int(signal.SIGCONT))
                    c.stop(timeout=5)

    def _wait_stopped(self, unit: str, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self._unit(unit).status in RUNNING:
            if time.monotonic() > deadline:
                raise RunError(f"{unit} is still running; cannot start another")
            time.sleep(0.05)

    def _give_to_units(self, path: Path) -> None:
        """The units run unprivileged (uid 1000): let them write the work directory. Root gives it to them; a
        controller that is another user (compose runs it as the host's) can only open it to everyone."""
        euid = os.geteuid()
        for p in [path, *path.rglob("*")]:
            if euid == 0:
                os.chown(p, UNIT_UID, UNIT_UID)
            elif euid != UNIT_UID:
                p.chmod(0o777 if p.is_dir() else 0o666)

    def _retire_active(self, problems: list[str]) -> None:
        """Remove ``.active.json`` (:func:`chaos.backends.unit.retire`): the volume outlives the deployment."""
        problem = retire(self.active, self.active_path)
        if problem:
            problems.append(problem)

    def _remove_work(self, problems: list[str]) -> None:
        """The work directory, once collected into the run directory (only then: a failed copy raises before this):
        on the volume, which outlives the deployment, every run left its checkpoints (~70 MB at the tiny preset)."""
        shutil.rmtree(self.work_local, ignore_errors=True)
        if self.work_local.exists():  # the units' files, when this controller is neither root nor their user
            problems.append(
                f"{self.work_in_units} is left on the runs volume (files the units wrote are not this user's to "
                f"remove); `docker volume rm {self.d.dep.project}_runs` frees it, and its cached baselines"
            )

    def _tail_log(self, unit: str, lines: int = 20) -> str:
        try:
            return self.d.container(unit).logs(tail=lines).decode(errors="replace")
        except Exception:  # noqa: BLE001
            return "(no log)"

    def _collect(self, problems: list[str]) -> None:
        """Container logs, trainer events and the final checkpoint into the run directory."""
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        for unit in [SYNCER, *self._ids]:
            try:
                log = self.d.container(unit).logs(since=self.started_at, timestamps=True)
                (self.run_dir / "logs" / f"{unit}.log").write_bytes(log)
            except Exception as err:  # noqa: BLE001
                problems.append(f"log of {unit}: {err}")
        for name in ("events", "audit"):  # audit: the merges kept whole (trainer.audit_log)
            src = self.work_local / name
            if src.exists():
                shutil.copytree(src, self.run_dir / name, dirs_exist_ok=True)
        for name in ("config.yaml", "seeds.json", "syncer.json"):
            if (self.work_local / name).exists():
                shutil.copyfile(self.work_local / name, self.run_dir / name)
        result = result_checkpoint(self.work_local / "checkpoints")
        if result is not None:
            shutil.copyfile(result, self.run_dir / "final.npz")
        summarize_run(self.run_dir).write(self.run_dir / "metrics.json")
