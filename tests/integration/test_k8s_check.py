"""Every built-in scenario's manifests decode strictly into the real Kubernetes and Chaos Mesh Go
types, and its Workflow passes Chaos Mesh's own admission validation (tools/k8scheck); a broken manifest is
rejected, naming the document and the field."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from chaos.fault_plan import plan
from chaos.k8s.export import export
from chaos.scenario import builtin_scenarios, load_scenario

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


BUILD_LOCK = REPO / ".tools" / "k8scheck.lock"  # held by scripts/install-k8scheck while it builds


def wait_for_a_build_under_way(lock: Path = BUILD_LOCK, timeout_s: float = 540.0) -> None:
    """scripts/test builds tools/k8scheck beside its phases (at the lowest priority during the first): wait until
    no build holds the lock (at once when none runs or ever ran); under pytest-timeout's 600 s, so that a build
    that never ends is named."""
    if not lock.exists():
        return
    deadline = time.monotonic() + timeout_s
    with lock.open() as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                assert time.monotonic() < deadline, f"scripts/install-k8scheck held {lock} for {timeout_s:.0f} s"
                time.sleep(1.0)


@pytest.fixture(scope="module")
def k8scheck() -> str:
    wait_for_a_build_under_way()
    found = os.environ.get("K8SCHECK") or str(REPO / ".tools" / "bin" / "k8scheck")
    if not (Path(found).is_file() and os.access(found, os.X_OK)):
        found = shutil.which("k8scheck") or ""
    assert found, "tools/k8scheck is not built: run scripts/install-k8scheck (scripts/setup does)"
    return found


def _check(k8scheck: str, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([k8scheck, *map(str, files)], capture_output=True, text=True, timeout=120)


def test_every_builtin_decodes_into_the_real_types(k8scheck: str, tmp_path: Path) -> None:
    files: list[Path] = []
    names = sorted(builtin_scenarios())
    for name in names:
        done = export(load_scenario(builtin_scenarios()[name]), tmp_path / name, token="t" * 32)
        files += [done.cluster, done.workflow]
    r = _check(k8scheck, *files)
    count = sum(1 for f in files for d in yaml.safe_load_all(f.read_text()) if d)
    assert r.returncode == 0 and r.stdout.strip() == f"ok: {count} objects", r.stdout + r.stderr


def test_a_broken_manifest_is_rejected_naming_the_document_and_the_field(k8scheck: str, tmp_path: Path) -> None:
    """Negative controls: a misspelt field in a StatefulSet, a Workflow step that names a missing template."""
    done = export(load_scenario(builtin_scenarios()["kill-and-rejoin"]), tmp_path / "x", token="t" * 32)
    cluster = done.cluster.read_text()
    assert "podManagementPolicy: Parallel\n" in cluster
    bad_cluster = tmp_path / "bad-cluster.yaml"
    bad_cluster.write_text(
        cluster.replace("podManagementPolicy: Parallel\n", "podManagementPolicy: Parallel\n  replica: 3\n", 1)
    )
    bad_flow = tmp_path / "bad-workflow.yaml"
    bad_flow.write_text(done.workflow.read_text().replace("  - wait-f0\n", "  - wait-nowhere\n", 1))
    r = _check(k8scheck, bad_cluster, bad_flow)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert any(
        'bad-cluster.yaml: document 4 (apps/v1/StatefulSet "syncer")' in x and 'unknown field "replica"' in x
        for x in lines
    ), lines
    assert any(
        "bad-workflow.yaml: document 1" in x and "can not find a template with name wait-nowhere" in x
        for x in lines
    ), lines


@pytest.mark.parametrize("name", ["kill-and-rejoin", "corrupt-learner", "straggler"])
def test_the_collectors_fixture_is_chaos_meshs_own_format(name: str, k8scheck: str, tmp_path: Path) -> None:
    """tests/unit/test_k8s_collect.py feeds the collector Chaos Mesh objects with their status: they decode
    strictly into Chaos Mesh's types (WorkflowNode, PodChaos with its records), so the fixture is the real shape."""
    from tests.unit.test_k8s_collect import chaos_mesh_objects

    s = load_scenario(builtin_scenarios()[name])
    flow, nodes, chaos = chaos_mesh_objects(s, {p.fault_id: (100.0, 108.0) for p in plan(s)}, 97.0)
    for obj in [flow, *nodes, *chaos]:
        obj["metadata"].setdefault("namespace", "diloco-chaos")
    fixture = tmp_path / "fixture.yaml"
    fixture.write_text(yaml.safe_dump_all([flow, *nodes, *chaos], sort_keys=False))
    r = _check(k8scheck, fixture)
    assert r.returncode == 0 and r.stdout.strip() == f"ok: {1 + len(nodes) + len(chaos)} objects", (
        r.stdout + r.stderr
    )


def _holder(lock: Path, release: Path) -> subprocess.Popen:
    """A real `flock` process holding ``lock`` (as scripts/install-k8scheck does) until ``release`` exists."""
    script = f"touch {lock}.held; while [ ! -e {release} ]; do sleep 0.05; done"
    p = subprocess.Popen(["flock", str(lock), "sh", "-c", script])
    while not Path(f"{lock}.held").exists():
        assert p.poll() is None, "the flock holder exited before taking the lock"
        time.sleep(0.01)
    return p


def test_the_fixture_waits_for_a_build_holding_the_lock(tmp_path: Path) -> None:
    lock, release = tmp_path / "k8scheck.lock", tmp_path / "release"
    holder = _holder(lock, release)
    releaser = subprocess.Popen(["sh", "-c", f"sleep 0.5; touch {release}"])
    try:
        wait_for_a_build_under_way(lock)
        assert release.exists(), "returned while the build still held the lock"
    finally:
        release.touch()
        holder.wait(10)
        releaser.wait(10)


def test_the_fixture_gives_up_naming_the_lock(tmp_path: Path) -> None:
    lock, release = tmp_path / "k8scheck.lock", tmp_path / "release"
    holder = _holder(lock, release)
    try:
        with pytest.raises(AssertionError, match="held .*k8scheck.lock for 1 s"):
            wait_for_a_build_under_way(lock, timeout_s=1.0)
        assert holder.poll() is None
    finally:
        release.touch()
        holder.wait(10)


def test_no_build_under_way_no_wait(tmp_path: Path) -> None:
    """With a timeout of 0 any wait fails (the fixture's own assertion), so returning is the check: no lock file
    (never built) or a lock nobody holds (a build that ended) lets the tests run at once."""
    missing = tmp_path / "never-built.lock"
    wait_for_a_build_under_way(missing, timeout_s=0.0)
    assert not missing.exists(), "waiting must not create the build's lock"
    ended = tmp_path / "built.lock"
    ended.touch()
    wait_for_a_build_under_way(ended, timeout_s=0.0)
    holder = _holder(ended, tmp_path / "release")  # negative control: a held lock with no time to wait fails
    try:
        with pytest.raises(AssertionError, match="held"):
            wait_for_a_build_under_way(ended, timeout_s=0.0)
    finally:
        (tmp_path / "release").touch()
        holder.wait(10)
