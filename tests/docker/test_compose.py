"""The compose deployment: real containers, the containerised Toxiproxy, faults through the Docker API.

Needs the Docker engine, Compose v2 and the project's images (``scripts/install-docker`` and
``scripts/build-images``; ``scripts/test`` runs both). The deployment is the repository's own
``docker-compose.yml``; every test leaves it stopped and removed (``docker compose down -v``). The
observability profile's tests are here too (one module: scripts/test keeps a module on one worker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.backends.docker import Deployment, DockerDeployment
from chaos.history import History
from tests.effects import partition_stops_uploads, syncer_restored, throttle_slows_uploads
from trainer import events as ev

pytestmark = pytest.mark.chaos_docker
REPO = Path(__file__).resolve().parents[2]
UNITS = ["toxiproxy", "syncer", "learner"]  # DILOCO_LEARNERS (default 4) learner replicas


def compose(
    *args: str, check: bool = True, timeout: float = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "compose", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def deployment() -> Iterator[None]:
    """The units up and idle (waiting for a run), torn down afterwards whatever happened."""
    compose("down", "-v", "--remove-orphans", check=False)
    compose("up", "-d", *UNITS)
    try:
        yield
    finally:
        compose("down", "-v", "--remove-orphans", check=False, timeout=300)


BASELINES = Path(os.environ.get("DILOCO_DOCKER_TEST_BASELINES", "/tmp/diloco-docker-test-baselines"))


def run_on_docker(name: str, out: Path, *sets: str) -> dict:
    """``diloco-chaos run NAME --backend docker`` from the host against the deployment (baselines shared)."""
    cmd = [
        sys.executable,
        "-m",
        "chaos.cli",
        "run",
        name,
        "--backend",
        "docker",
        "--out",
        str(out),
        "--baseline-cache",
        str(BASELINES),
    ]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert (out / "report.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    report["_exit"] = proc.returncode
    report["_output"] = proc.stdout[-3000:]
    return report


def _passed(report: dict) -> None:
    failed = [f"{v['name']}: {v['status']}: {v['summary']}" for v in report["verdicts"] if v["status"] != "pass"]
    assert not failed and report["_exit"] == 0, failed or report["_output"]
    assert report["teardown"]["proxies_left"] == [] and report["teardown"]["processes_left"] == []


def compose_up_run(prefix: str, env: dict[str, str], timeout: float) -> tuple[Path, dict]:
    """``docker compose up`` from a stopped deployment to the controller's exit, torn down whatever happened;
    returns the new report directory ``./reports/<prefix>*`` and its report.json, after the checks every
    compose run must pass: verdict PASS (printed in the controller's log), nothing left behind (no proxy, no
    process, no ``.active.json`` or work directory on the runs volume), report files."""
    reports = REPO / "reports"
    reports.mkdir(exist_ok=True)
    before = set(reports.glob(f"{prefix}*"))
    compose("down", "-v", "--remove-orphans", check=False)
    try:
        up = compose("up", env=env, timeout=timeout)
        logs = compose("logs", "controller", check=False).stdout
        # The volume outlives the deployment (the main job keeps it): the next one's units must find no run to start.
        runs = DockerDeployment(Deployment()).runs_local()
        assert not (runs / ".active.json").exists(), "the run left .active.json on the runs volume"
        assert not list(runs.glob("work/*")), "the run left its work directory on the runs volume"
    finally:
        compose("down", "-v", "--remove-orphans", check=False, timeout=300)
    new = sorted(set(reports.glob(f"{prefix}*")) - before)
    assert new, up.stdout[-3000:]
    out = new[-1]
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "pass", [v for v in report["verdicts"] if v["status"] != "pass"]
    assert report["teardown"]["proxies_left"] == [] and report["teardown"]["processes_left"] == []
    assert (out / "report.md").exists() and (out / "timeline.png").exists()
    assert "PASS" in logs  # the verdict is printed
    return out, report


# The nightly fault runs on the compose deployment, one a night in turn (5 min each at most; every kind they
# inject also runs per change on local processes, and the container kinds in the per-change compose run below).
ROTATED = pytest.mark.chaos_rotate(per_night=1, family="container faults")


@pytest.mark.chaos_nightly
def test_compose_up_runs_the_default_scenario_and_reports_on_the_host() -> None:
    _, report = compose_up_run("kill-and-rejoin-", {"DILOCO_LEARNERS": "3"}, timeout=1500)
    assert report["parity_false_alarm"]["runs"] >= 8, report["parity_false_alarm"]  # the image carries the rate


@pytest.mark.chaos_nightly
@ROTATED
def test_container_kill_restart_rejoins(deployment, tmp_path) -> None:
    report = run_on_docker("kill-and-rejoin", tmp_path / "kill")
    _passed(report)
    history = History.read(tmp_path / "kill")
    starts = [e for e in history.of(ev.LearnerStart) if e.learner_id == "learner-1"]
    assert len(starts) == 2, "the killed learner's container was not started again"
    assert (tmp_path / "kill" / "logs" / "learner-1.log").stat().st_size > 0  # container logs collected


@pytest.mark.chaos_nightly
@ROTATED
def test_syncer_container_resumes_from_its_checkpoint_volume(deployment, tmp_path) -> None:
    # A container restart stalls training longer than a local process restart (measured 2026-11-30: 13.6 s
    # without merges, +0.061 final loss in a 71 s run, against ~4 s and ≤ 0.02 locally), so parity gets
    # a container-sized tolerance here; the local chaos suite keeps the scenario's 0.05.
    report = run_on_docker("syncer-crash", tmp_path / "crash", "checks.parity.tolerance=0.12")
    _passed(report)
    syncer_restored(History.read(tmp_path / "crash"), _Result(report))


@pytest.mark.chaos_nightly
@ROTATED
def test_toxiproxy_partition_and_bandwidth_between_containers(deployment, tmp_path) -> None:
    for name, effect in (("partition-one", partition_stops_uploads), ("throttle-all", throttle_slows_uploads)):
        report = run_on_docker(name, tmp_path / name)
        _passed(report)
        effect(History.read(tmp_path / name), _Result(report))


class _Result:
    """The slice of chaos.controller.RunResult the effect checks read, rebuilt from report.json."""

    def __init__(self, report: dict) -> None:
        from chaos.run_report import RunReport

        self.report = RunReport.model_validate(report)  # run_on_docker's own keys (_exit, _output) are ignored
        self.verdicts = self.report.verdicts


CONTAINER_FAULTS = """
name: container-faults
description: CPU-limit one learner container (slower hardware), disconnect another from the network.
cluster:
  token_budget: 2400000
  model: {size: tiny}
  algorithm: {mode: decoupled, num_learners: 3, num_fragments: 4, sync_every: 8}
  syncer: {checkpoint_every_merges: 10, eval_every_merges: 20}
schedule:
  - {fault: cpu_limit, id: slow-box, cpus: 0.15, targets: [learner-1], at: 3, duration: 12}
  - {fault: disconnect, id: unplugged, targets: [learner-2], at: 3, duration: 10}
checks:
  liveness: {max_gap_s: 10}
  reintegration: {within_s: 40}
  parity: {tolerance: 0.05}
"""


@pytest.mark.covers("cpu_limit", "disconnect")
def test_compose_up_runs_a_scenario_file_with_container_faults_end_to_end() -> None:
    """The per-change container run: ``docker compose up`` end to end (controller container, Docker API,
    containerised Toxiproxy, report on the host) on a scenario file with both container-only fault kinds.

    Parity is off (no baseline runs: minutes in containers); the main job with its baselines is nightly.
    """
    (REPO / "reports").mkdir(exist_ok=True)
    scenario = (
        REPO / "reports" / f"ci-container-faults-{os.getpid()}.yaml"
    )  # ./reports is /reports in the controller
    scenario.write_text(CONTAINER_FAULTS.replace("parity: {tolerance: 0.05}", "parity: {enabled: false}"))
    try:
        out, _ = compose_up_run(
            "container-faults-",
            {"DILOCO_LEARNERS": "3", "DILOCO_SCENARIO": f"/reports/{scenario.name}"},
            timeout=1200,
        )
    finally:
        scenario.unlink(missing_ok=True)
    h = History.read(out)
    windows = {w.fault_id: w for w in h.fault_windows()}

    def rate(lid: str, a: float, b: float) -> float:
        steps = [s for s in h.of(ev.Step) if s.source == lid and a <= s.ts <= b]
        return (steps[-1].step - steps[0].step) / (steps[-1].ts - steps[0].ts)

    w = windows["slow-box"]
    assert w.injected and w.healed and w.end is not None
    assert rate("learner-1", w.start + 1, w.end) < 0.6 * rate("learner-0", w.start + 1, w.end)
    w = windows["unplugged"]
    assert w.injected and w.healed
    assert not [u for u in h.of(ev.Upload) if u.learner_id == "learner-2" and w.start + 1 <= u.ts <= w.end]
    assert [u for u in h.of(ev.Upload) if u.learner_id == "learner-2" and u.ts > w.end]


@pytest.mark.chaos_nightly
@ROTATED
def test_shrunk_schedule_replays_on_containers(deployment, tmp_path) -> None:
    """The repro a deterministic-mode search writes fails the same way on the compose deployment."""
    from tests.chaos.test_replay import planted_repro

    repro = planted_repro(tmp_path / "repro.yaml")
    out = tmp_path / "replay"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.cli",
            "replay",
            str(repro),
            "--backend",
            "docker",
            "--no-baseline",
            "--quiet",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert (out / "report.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    verdicts = {v["name"]: v["status"] for v in report["verdicts"]}
    assert proc.returncode == 1 and verdicts["reintegration"] == "fail", verdicts
    assert report["teardown"]["proxies_left"] == [] and report["teardown"]["processes_left"] == []


def test_container_faults_are_refused_on_the_local_backend(tmp_path) -> None:
    scenario = tmp_path / "container-faults.yaml"
    scenario.write_text(CONTAINER_FAULTS)
    proc = subprocess.run(
        [sys.executable, "-m", "chaos.cli", "run", str(scenario), "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--backend docker" in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.chaos_nightly
def test_learners_reach_the_syncer_only_through_toxiproxy(deployment) -> None:
    # Docker's DNS resolves only names on a network the container shares: the syncer's name must not
    # resolve from a learner (no direct route), Toxiproxy's must.
    probe = (
        "import socket\n"
        "def resolves(host):\n"
        "    try:\n"
        "        socket.gethostbyname(host); return True\n"
        "    except OSError:\n"
        "        return False\n"
        "print(resolves('syncer'), resolves('toxiproxy'))\n"
    )
    out = compose("exec", "-T", "--index", "1", "learner", "python", "-c", probe).stdout.split()
    assert out == ["False", "True"], out


# ---- the observability profile: the real Prometheus (the locally built image) with the repository's config
# and rules, checked by promtool, and scraping a real compose chaos run (docs/observability.md).

PROMETHEUS_IMAGE = os.environ.get("DILOCO_PROMETHEUS_IMAGE", "diloco-chaos/prometheus:2.42")
PROMETHEUS = "http://127.0.0.1:9090"


def promtool(*args: str, mounts: dict[Path, str]) -> subprocess.CompletedProcess:
    volumes = [a for host, inside in mounts.items() for a in ("-v", f"{host}:{inside}:ro")]
    return subprocess.run(
        ["docker", "run", "--rm", *volumes, "--entrypoint", "promtool", PROMETHEUS_IMAGE, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_prometheus_config_and_rules_are_valid() -> None:
    r = promtool(
        "check", "config", "/etc/prometheus/prometheus.yml", mounts={REPO / "observability": "/etc/prometheus"}
    )
    assert r.returncode == 0 and "8 rules found" in r.stdout, r.stdout + r.stderr


def test_the_recording_rules_compute_goodput_and_stalls() -> None:
    """promtool's rule unit tests (tests/docker/rules_test.yml): compute goodput, merges, stalls, the alert."""
    r = promtool(
        "test",
        "rules",
        "/tmp/rules_test.yml",
        mounts={
            REPO / "observability": "/etc/prometheus",
            REPO / "tests/docker/rules_test.yml": "/tmp/rules_test.yml",
        },
    )
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_a_broken_expectation_fails_promtool(tmp_path: Path) -> None:
    """Negative control: the same rule tests with a wrong compute goodput must fail."""
    wrong = tmp_path / "rules_test.yml"
    wrong.write_text((REPO / "tests/docker/rules_test.yml").read_text().replace("value: 0.75", "value: 0.5"))
    r = promtool(
        "test",
        "rules",
        "/tmp/rules_test.yml",
        mounts={REPO / "observability": "/etc/prometheus", wrong: "/tmp/rules_test.yml"},
    )
    assert r.returncode != 0 and "compute_goodput" in r.stdout + r.stderr


def query(expr: str) -> list[dict]:
    url = f"{PROMETHEUS}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    body = json.loads(urllib.request.urlopen(url, timeout=5).read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def value(expr: str) -> float:
    result = query(expr)
    return float(result[0]["value"][1]) if result else 0.0


@pytest.mark.chaos_nightly
def test_prometheus_scrapes_a_compose_chaos_run(tmp_path: Path) -> None:
    """`--profile observability`: Prometheus finds the syncer, every learner replica, the controller and
    Toxiproxy, and sees merges, rejections (a corrupt learner's NaN uploads), active faults and the recorded
    rules while the run goes on; the controller runs as a non-root user, and its report links the range."""
    reports = tmp_path / "reports"
    reports.mkdir()
    reports.chmod(0o777)
    env = {
        "DILOCO_LEARNERS": "3",
        "DILOCO_UID": "1000",
        "DILOCO_GID": "1000",
        "DOCKER_GID": str(os.stat("/var/run/docker.sock").st_gid),
    }
    down = ("--profile", "observability", "down", "-v", "--remove-orphans")  # a profile's services need it named
    compose(*down, check=False)
    try:
        compose(
            "--profile",
            "observability",
            "up",
            "-d",
            "--wait",
            "toxiproxy",
            "syncer",
            "learner",
            "prometheus",
            env=env,
            timeout=300,
        )
        run = subprocess.Popen(
            [
                "docker",
                "compose",
                "run",
                "--rm",
                "--use-aliases",
                "-v",
                f"{reports}:/reports",
                "controller",
                "diloco-chaos",
                "run",
                "corrupt-learner",
                "--backend",
                "docker",
                "--no-baseline",
                "--quiet",
                "--set",
                "cluster.algorithm.num_learners=3",
                "--metrics-host",
                "0.0.0.0",
                "--metrics-port",
                "9400",
            ],
            cwd=REPO,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen: dict[str, float] = {}
        wanted = {
            "merges": "sum(diloco_merges_total)",
            "rejected NaN uploads": 'sum(diloco_rejections_total{call="Upload", reason="non_finite"})',
            "learner targets up": 'sum(up{job="learner"})',
            "learners named": 'count(diloco_unit_info{job="learner"})',
            "controller up": 'sum(up{job="controller"})',
            "a fault active": "max_over_time(diloco:faults_active[5m])",
            "toxiproxy proxy metrics": "count(toxiproxy_proxy_received_bytes_total)",
            "merge rate recorded": "diloco:merges:rate1m",
        }
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and run.poll() is None:
            for name, expr in wanted.items():
                seen[name] = max(seen.get(name, 0.0), value(expr))
            if all(seen.values()):
                break
            time.sleep(2)
        assert all(seen.values()), {n: v for n, v in seen.items()}
        assert seen["learner targets up"] == 3 and seen["learners named"] == 3, seen
        # The shipped Grafana dashboard: every query is valid PromQL on this Prometheus, and the per-learner
        # join (learner ids from diloco_unit_info) names every replica.
        dashboard = json.loads((REPO / "observability/grafana/diloco-chaos.json").read_text())
        exprs = {p["title"]: t["expr"] for p in dashboard["panels"] for t in p["targets"]}
        results = {title: query(expr) for title, expr in exprs.items()}
        results["annotations"] = query(dashboard["annotations"]["list"][0]["expr"])
        assert results["Merges per second"] and results["Merged model's eval loss"], results
        assert {r["metric"]["unit"] for r in results["Learner training loss"]} == {
            "learner-0",
            "learner-1",
            "learner-2",
        }, results
        output, _ = run.communicate(timeout=600)
    finally:
        compose(*down, check=False, timeout=300)
    assert run.returncode == 0, output[-3000:]
    (out,) = [p for p in reports.iterdir() if p.is_dir()]
    assert out.stat().st_uid == 1000  # written by the non-root controller
    assert "http://localhost:9090/graph?g0.expr=diloco%3Amerges%3Arate1m" in (out / "report.md").read_text()
