"""The observability profile: the real Prometheus (the locally built image) with the repository's config and
rules, checked by promtool, and scraping a real compose chaos run.

Needs what tests/docker/test_compose.py needs (``scripts/build-images`` builds the Prometheus image too).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.docker.test_compose import REPO, compose

pytestmark = pytest.mark.chaos_docker
IMAGE = os.environ.get("DILOCO_PROMETHEUS_IMAGE", "diloco-chaos/prometheus:2.42")
PROMETHEUS = "http://127.0.0.1:9090"


def promtool(*args: str, mounts: dict[Path, str]) -> subprocess.CompletedProcess:
    volumes = [a for host, inside in mounts.items() for a in ("-v", f"{host}:{inside}:ro")]
    return subprocess.run(["docker", "run", "--rm", *volumes, "--entrypoint", "promtool", IMAGE, *args],
                          capture_output=True, text=True, timeout=120)


def test_the_prometheus_config_and_rules_are_valid() -> None:
    r = promtool("check", "config", "/etc/prometheus/prometheus.yml",
                 mounts={REPO / "observability": "/etc/prometheus"})
    assert r.returncode == 0 and "8 rules found" in r.stdout, r.stdout + r.stderr


def test_the_recording_rules_compute_goodput_and_stalls() -> None:
    """promtool's rule unit tests (tests/docker/rules_test.yml): compute goodput, merges, stalls, the alert."""
    r = promtool("test", "rules", "/tmp/rules_test.yml", mounts={REPO / "observability": "/etc/prometheus",
                                                                 REPO / "tests/docker/rules_test.yml": "/tmp/rules_test.yml"})
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_a_broken_expectation_fails_promtool(tmp_path: Path) -> None:
    """Negative control: the same rule tests with a wrong compute goodput must fail."""
    wrong = tmp_path / "rules_test.yml"
    wrong.write_text((REPO / "tests/docker/rules_test.yml").read_text().replace("value: 0.75", "value: 0.5"))
    r = promtool("test", "rules", "/tmp/rules_test.yml", mounts={REPO / "observability": "/etc/prometheus",
                                                                 wrong: "/tmp/rules_test.yml"})
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
    env = {"DILOCO_LEARNERS": "3", "DILOCO_UID": "1000", "DILOCO_GID": "1000",
           "DOCKER_GID": str(os.stat("/var/run/docker.sock").st_gid)}
    down = ("--profile", "observability", "down", "-v", "--remove-orphans")  # a profile's services need it named
    compose(*down, check=False)
    try:
        compose("--profile", "observability", "up", "-d", "--wait", "toxiproxy", "syncer", "learner", "prometheus",
                env=env, timeout=300)
        run = subprocess.Popen(["docker", "compose", "run", "--rm", "--use-aliases", "-v", f"{reports}:/reports",
                                "controller", "diloco-chaos", "run", "corrupt-learner", "--backend", "docker",
                                "--no-baseline", "--quiet", "--set", "cluster.algorithm.num_learners=3",
                                "--metrics-host", "0.0.0.0", "--metrics-port", "9400"],
                               cwd=REPO, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
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
        assert {r["metric"]["unit"] for r in results["Learner training loss"]} == {"learner-0", "learner-1",
                                                                                  "learner-2"}, results
        output, _ = run.communicate(timeout=600)
    finally:
        compose(*down, check=False, timeout=300)
    assert run.returncode == 0, output[-3000:]
    (out,) = [p for p in reports.iterdir() if p.is_dir()]
    assert out.stat().st_uid == 1000  # written by the non-root controller
    assert "http://localhost:9090/graph?g0.expr=diloco%3Amerges%3Arate1m" in (out / "report.md").read_text()
