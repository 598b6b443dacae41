"""The namespace network (faults.netns) on this machine's kernel: units in namespaces reach the coordinator on the
bridge and each other; a partition drops a unit's packets until mended; a throttle is a token bucket on both ends;
latency is refused with its reason; teardown leaves nothing. Needs root (CAP_NET_ADMIN), as the tier runs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import pytest

from faults.errors import FaultError
from faults.netns import NETEM_MISSING, Namespaces
from faults.network import Latency, Partition
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")]

PROBE = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()"


@pytest.fixture
def net() -> Iterator[Namespaces]:
    n = Namespaces.for_run(f"test-{uuid.uuid4()}", ["learner-0", "learner-1"])
    try:
        n.up()
        yield n
    finally:
        problems = n.teardown()
        assert not problems and not n.left(), (problems, n.left())


@pytest.fixture
def listener(net: Namespaces) -> Iterator[int]:
    """A TCP server on the bridge's address in the root namespace (where a syncer or Lighthouse listens)."""
    srv = socket.create_server((net.gateway, 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                srv.accept()[0].close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


def reaches(net: Namespaces, unit: str, host: str, port: int) -> bool:
    cmd = [*net.exec_prefix(unit), sys.executable, "-c", PROBE, host, str(port)]
    return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0


class _Cluster:
    """The smallest faults.base.OnNamespaces cluster: the network faults' own code path."""

    def __init__(self, net: Namespaces) -> None:
        self._net = net

    @property
    def namespaces(self) -> Namespaces:
        return self._net

    def learners(self) -> list[str]:
        return list(self._net.units)


def test_a_partition_cuts_a_unit_off_until_healed(net: Namespaces, listener: int) -> None:
    assert reaches(net, "learner-0", net.gateway, listener) and reaches(net, "learner-1", net.gateway, listener)
    hostname = subprocess.run([*net.exec_prefix("learner-1"), "hostname"], capture_output=True, text=True).stdout
    assert hostname.strip() == net.namespace("learner-1")  # a name of its own, which every unit resolves
    p = Partition("p1", ("learner-0",))
    evidence = p.inject(_Cluster(net))  # type: ignore[arg-type]
    assert evidence["namespaces"] == {"learner-0": net.namespace("learner-0")}
    assert not reaches(net, "learner-0", net.gateway, listener)
    assert reaches(net, "learner-1", net.gateway, listener)  # only the target
    assert p.heal(_Cluster(net))["mended"] == ["learner-0"]  # type: ignore[arg-type]
    wait_until(lambda: reaches(net, "learner-0", net.gateway, listener), 10, "learner-0 reaching the bridge again")


def test_a_throttle_shapes_both_ends_and_latency_is_refused(net: Namespaces) -> None:
    net.throttle("learner-0", 100_000)
    inside = subprocess.run(
        [*net.exec_prefix("learner-0"), "tc", "qdisc", "show", "dev", "eth0"], capture_output=True, text=True
    ).stdout
    outside = subprocess.run(
        ["tc", "qdisc", "show", "dev", f"{net.bridge}h0"], capture_output=True, text=True
    ).stdout
    assert "tbf" in inside and "tbf" in outside and "800Kbit" in inside, (inside, outside)
    assert net.unthrottle("learner-0") and not net.unthrottle("learner-0")
    with pytest.raises(FaultError, match=NETEM_MISSING):
        Latency("l1", ("learner-0",), latency_ms=50).inject(_Cluster(net))  # type: ignore[arg-type]


def test_a_network_whose_owner_was_sigkilled_is_swept_by_the_next() -> None:
    code = (
        "import sys, time; from faults.netns import Namespaces; n = Namespaces.for_run(sys.argv[1], ['a', 'b']); "
        "n.up(); print(n.tag, flush=True); time.sleep(120)"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code, f"sweep-{uuid.uuid4()}"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        tag = owner.stdout.readline().strip()
        orphan = Namespaces(tag, ["a", "b"])
        assert orphan.left(), "the owner's network should exist while it runs"
        assert tag not in Namespaces.sweep()  # its owner lives: not swept
    finally:
        owner.kill()
        owner.wait()
    assert tag in Namespaces.sweep()
    assert not orphan.left()
    forward = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    assert f"dcx{tag}" not in forward
