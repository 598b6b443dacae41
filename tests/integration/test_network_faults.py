"""Every network fault through a real Toxiproxy over real sockets: its effect, and that heal fully undoes it.

The tests' fake cluster (:class:`tests.support.FakeCluster`: its network side only) maps two "learners" to two
proxies in front of small local TCP servers written here: an echo server, a length-prefixed sink that answers
with the byte count, and a recorder that logs what it receives while it sends ticks on its own.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from faults.base import Cluster, Fault
from faults.errors import FaultError, TargetError
from faults.network import (
    FAULTS,
    Bandwidth,
    DataLimit,
    Latency,
    LinkDown,
    Partition,
    ResetPeer,
    toxic_name,
)
from faults.toxiproxy import Toxiproxy
from tests.support import EchoHandler, FakeCluster, wait_until

pytestmark = pytest.mark.integration

L0, L1 = "learner-0", "learner-1"


# -- upstream test servers ------------------------------------------------------------------------------------


class _Sink(socketserver.BaseRequestHandler):
    """Reads an 8-byte length then that many bytes, answers the count (8 bytes); repeats."""

    def handle(self) -> None:
        f = self.request.makefile("rb")
        while True:
            header = f.read(8)
            if len(header) < 8:
                return
            (n,) = struct.unpack("!Q", header)
            got = len(f.read(n))
            self.request.sendall(struct.pack("!Q", got))


class _Recorder(socketserver.BaseRequestHandler):
    """Records every byte received (per connection) and sends b"t" every 20 ms until the peer goes away."""

    def handle(self) -> None:
        received = bytearray()
        self.server.received.append(received)  # type: ignore[attr-defined]
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(0.02):
                try:
                    self.request.sendall(b"t")
                except OSError:
                    return

        threading.Thread(target=tick, daemon=True).start()
        try:
            while data := self.request.recv(65536):
                received.extend(data)
        except OSError:
            pass
        finally:
            stop.set()


def _serve(handler: type[socketserver.BaseRequestHandler]) -> socketserver.ThreadingTCPServer:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.received = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, socketserver.ThreadingTCPServer]]:
    running = {"echo": _serve(EchoHandler), "sink": _serve(_Sink), "recorder": _serve(_Recorder)}
    yield running
    for server in running.values():
        server.shutdown()
        server.server_close()


# -- the fake cluster -----------------------------------------------------------------------------------------


@pytest.fixture
def make_cluster(
    toxiproxy: Toxiproxy,
    servers: dict[str, socketserver.ThreadingTCPServer],
    request: pytest.FixtureRequest,
) -> Callable[[str], FakeCluster]:
    """``make_cluster("echo")``: two learners whose proxies forward to that server (deleted after the test, with
    every other proxy on the module's server: the ``toxiproxy`` fixture)."""

    def make(upstream: str) -> FakeCluster:
        port = servers[upstream].server_address[1]
        proxies, ports = {}, {}
        for lid in (L0, L1):
            name = f"{request.node.name[:40]}-{lid}"
            ports[lid] = toxiproxy.create_proxy(name, "127.0.0.1:0", f"127.0.0.1:{port}").port
            proxies[lid] = name
        return FakeCluster([L0, L1], client=toxiproxy, proxies=proxies, ports=ports)

    return make


def _connect(cluster: FakeCluster, lid: str, timeout_s: float = 2.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", cluster.ports[lid]), timeout=timeout_s)


def _echo_ok(cluster: FakeCluster, lid: str, payload: bytes = b"ping") -> bool:
    with _connect(cluster, lid) as s:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got == payload


def _rtt(cluster: FakeCluster, lid: str) -> float:
    with _connect(cluster, lid) as s:
        s.sendall(b"warm")
        s.recv(4)
        start = time.monotonic()
        s.sendall(b"ping")
        assert s.recv(4) == b"ping"
        return time.monotonic() - start


def _upload_s(cluster: FakeCluster, lid: str, nbytes: int) -> float:
    payload = b"x" * nbytes
    with _connect(cluster, lid, timeout_s=10.0) as s:
        start = time.monotonic()
        s.sendall(struct.pack("!Q", nbytes) + payload)
        assert struct.unpack("!Q", s.makefile("rb").read(8))[0] == nbytes
        return time.monotonic() - start


def _accepted(recorder: socketserver.ThreadingTCPServer, index: int) -> bytearray:
    """The recorder's byte log of its ``index``-th connection, once it has accepted it."""
    received = recorder.received  # type: ignore[attr-defined]
    wait_until(lambda: len(received) > index, 5, f"the recorder to accept connection #{index}")
    return received[index]


def _assert_clean(cluster: FakeCluster) -> None:
    """Heal undid everything: every proxy enabled, no toxic left, traffic flows."""
    for lid, name in cluster.proxies.items():
        info = cluster.toxiproxy.get_proxy(name)
        assert info.enabled and info.toxics == (), f"{lid}'s proxy still has {info}"


def _toxic_names(cluster: FakeCluster, lid: str) -> list[str]:
    return sorted(t.name for t in cluster.toxiproxy.toxics(cluster.proxy(lid)))


def _inject_twice(fault, cluster: FakeCluster) -> None:
    fault.inject(cluster)
    fault.inject(cluster)  # idempotent: one set of toxics


def _heal_twice(fault, cluster: FakeCluster) -> None:
    fault.heal(cluster)
    fault.heal(cluster)  # idempotent
    _assert_clean(cluster)


# -- the faults -----------------------------------------------------------------------------------------------


def test_fake_cluster_satisfies_the_network_part_of_the_protocol(make_cluster) -> None:
    cluster = make_cluster("echo")
    assert {cls.kind for cls in FAULTS} == {
        "partition",
        "link_down",
        "bandwidth",
        "latency",
        "reset_peer",
        "data_limit",
    }
    assert {"learners", "proxy", "toxiproxy"} <= set(dir(Cluster))
    assert all(
        isinstance(cls("f", (L0,), **args), Fault)
        for cls, args in [
            (Partition, {}),
            (LinkDown, {}),
            (Bandwidth, {"rate_kbps": 1}),
            (Latency, {"latency_ms": 1}),
            (ResetPeer, {}),
            (DataLimit, {"bytes": 1}),
        ]
    )
    assert _echo_ok(cluster, L0) and _echo_ok(cluster, L1)


@pytest.mark.covers("partition")
def test_partition_both_blackholes_and_heal_restores(make_cluster) -> None:
    cluster = make_cluster("echo")
    fault = Partition("p1", (L0,))
    _inject_twice(fault, cluster)
    assert _toxic_names(cluster, L0) == [toxic_name("p1", "downstream"), toxic_name("p1", "upstream")]
    assert _toxic_names(cluster, L1) == []  # the other learner's link is untouched ...

    with _connect(cluster, L0, timeout_s=0.5) as s:  # ... while this one accepts, then goes silent
        s.sendall(b"ping")
        with pytest.raises(TimeoutError):
            s.recv(4)
        assert _echo_ok(cluster, L1)
        _heal_twice(fault, cluster)
        # Toxiproxy closes connections whose timeout toxic is removed: the peer sees EOF and reconnects.
        s.settimeout(2.0)
        assert s.recv(4) == b""
    assert _echo_ok(cluster, L0)


def test_partition_of_the_syncer_cuts_every_learner(make_cluster) -> None:
    cluster = make_cluster("echo")
    fault = Partition("iso", ("syncer",))
    fault.inject(cluster)
    assert _toxic_names(cluster, L0) == _toxic_names(cluster, L1) == ["chaos-iso-down", "chaos-iso-up"]
    assert "every learner" in fault.describe()
    _heal_twice(fault, cluster)
    assert _echo_ok(cluster, L0) and _echo_ok(cluster, L1)


@pytest.mark.parametrize("direction", ["to_syncer", "from_syncer"])
def test_asymmetric_partition_blocks_one_direction_only(make_cluster, servers, direction: str) -> None:
    recorder = servers["recorder"]
    cluster = make_cluster("recorder")
    fault = Partition(f"asym-{direction}", (L0,), direction=direction)
    _inject_twice(fault, cluster)
    assert _toxic_names(cluster, L0) == [
        toxic_name(fault.fault_id, "upstream" if direction == "to_syncer" else "downstream")
    ]
    before = len(recorder.received)
    with _connect(cluster, L0, timeout_s=0.3) as s:
        record = _accepted(recorder, before)
        s.sendall(b"hello")
        ticks = b""
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            try:
                ticks += s.recv(1024)
            except TimeoutError:
                pass
        if direction == "to_syncer":
            assert bytes(record) == b"", "bytes to the syncer got through a to_syncer partition"
            assert ticks.count(b"t") >= 3, "the syncer→learner direction should still flow"
        else:
            wait_until(lambda: bytes(record) == b"hello", 2, "learner→syncer bytes to arrive")
            assert ticks == b"", "bytes from the syncer got through a from_syncer partition"
    _heal_twice(fault, cluster)
    with _connect(cluster, L0) as s:  # a new connection flows both ways again
        record = _accepted(recorder, before + 1)
        s.sendall(b"again")
        assert s.recv(1) == b"t"
        wait_until(lambda: bytes(record) == b"again", 2, "bytes to the syncer after heal")


@pytest.mark.covers("link_down")
def test_link_down_refuses_and_closes_then_heal_restores(make_cluster) -> None:
    cluster = make_cluster("echo")
    fault = LinkDown("down1", (L0,))
    with _connect(cluster, L0) as live:
        live.sendall(b"a")
        assert live.recv(1) == b"a"
        _inject_twice(fault, cluster)
        assert live.recv(1) == b""  # the live connection was closed
    assert cluster.toxiproxy.get_proxy(cluster.proxy(L0)).enabled is False
    with pytest.raises(ConnectionRefusedError):
        _connect(cluster, L0)
    assert _echo_ok(cluster, L1)  # the other learner's link still works
    _heal_twice(fault, cluster)
    assert _echo_ok(cluster, L0)


@pytest.mark.covers("bandwidth")
def test_bandwidth_slows_a_transfer(make_cluster) -> None:
    cluster = make_cluster("sink")
    nbytes = 200_000
    baseline = _upload_s(cluster, L0, nbytes)
    fault = Bandwidth("bw1", (L0,), rate_kbps=100)
    _inject_twice(fault, cluster)
    assert len(_toxic_names(cluster, L0)) == 2
    throttled = _upload_s(cluster, L0, nbytes)  # 200 KB at 100 KB/s: ~2 s
    unaffected = _upload_s(cluster, L1, nbytes)
    assert throttled >= 1.5, f"200 KB at 100 KB/s took only {throttled:.2f}s"
    assert baseline < 1.0 and unaffected < 1.0, f"unthrottled uploads took {baseline:.2f}s / {unaffected:.2f}s"
    _heal_twice(fault, cluster)
    assert _upload_s(cluster, L0, nbytes) < 1.0


@pytest.mark.covers("latency")
def test_latency_adds_one_way_delay_on_each_direction(make_cluster) -> None:
    cluster = make_cluster("echo")
    # Lower bounds are exact (Toxiproxy sleeps at least the latency); the "no latency" bounds have wide margins.
    fault = Latency("lat1", (L0,), latency_ms=250)
    _inject_twice(fault, cluster)
    assert len(_toxic_names(cluster, L0)) == 2
    rtt = _rtt(cluster, L0)
    assert rtt >= 0.5, f"round trip {rtt:.3f}s is below 2 x 250 ms"
    assert _rtt(cluster, L1) < 0.25  # the other learner: no added latency
    _heal_twice(fault, cluster)
    assert _rtt(cluster, L0) < 0.25

    one_way = Latency("lat2", (L0,), latency_ms=250, direction="to_syncer")
    one_way.inject(cluster)
    assert _rtt(cluster, L0) >= 0.25
    _heal_twice(one_way, cluster)


@pytest.mark.covers("reset_peer")
def test_reset_peer_resets_connections_once_data_flows(make_cluster) -> None:
    cluster = make_cluster("echo")
    fault = ResetPeer("rst1", (L0,))
    _inject_twice(fault, cluster)
    with _connect(cluster, L0) as s:  # the connection is accepted ...
        s.sendall(b"ping")
        with pytest.raises(ConnectionResetError):  # ... and reset once bytes flow
            s.recv(4)
    assert _echo_ok(cluster, L1)
    _heal_twice(fault, cluster)
    assert _echo_ok(cluster, L0)


@pytest.mark.covers("data_limit")
@pytest.mark.parametrize("direction", ["from_syncer", "to_syncer", "both"])
def test_data_limit_closes_the_connection_after_n_bytes(make_cluster, servers, direction: str) -> None:
    limit = 1000
    if direction == "to_syncer":
        recorder = servers["recorder"]
        cluster = make_cluster("recorder")
        before = len(recorder.received)
    else:
        cluster = make_cluster("echo")
    fault = DataLimit("dl1", (L0,), bytes=limit, direction=direction)
    _inject_twice(fault, cluster)
    with _connect(cluster, L0) as s:
        if direction == "to_syncer":
            record = _accepted(recorder, before)
        s.sendall(b"x" * (3 * limit))
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
        # The connection ended (EOF or reset) instead of carrying all 3000 bytes.
        if direction == "from_syncer":
            assert got == b"x" * limit
        elif direction == "to_syncer":
            wait_until(lambda: len(record) == limit, 2, f"exactly {limit} bytes to reach the syncer")
        else:
            # The upstream limit closes the whole connection, often before the echo comes back: at most N.
            assert len(got) <= limit
    _heal_twice(fault, cluster)
    if direction == "to_syncer":
        with _connect(cluster, L0) as s:
            record = _accepted(recorder, before + 1)
            s.sendall(b"y" * (3 * limit))
            wait_until(lambda: len(record) == 3 * limit, 2, "every byte to reach the syncer after heal")
    else:
        assert _echo_ok(cluster, L0, b"y" * (3 * limit))


# -- targets and validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        Partition("u1", ("learner-9",)),
        LinkDown("u2", ("learner-9",)),
        Latency("u3", ("learner-9",), latency_ms=1),
    ],
)
def test_unknown_target_is_a_target_error_naming_it(make_cluster, fault) -> None:
    cluster = make_cluster("echo")
    for action in (fault.inject, fault.heal):
        with pytest.raises(TargetError, match="learner-9") as err:
            action(cluster)
        assert L0 in str(err.value) and L1 in str(err.value)
    _assert_clean(cluster)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Partition("f", ()), "targets"),
        (lambda: Partition("f", "learner-0"), "targets"),  # type: ignore[arg-type]  # the check under test
        (lambda: Partition("", ("learner-0",)), "fault_id"),
        (lambda: Partition("f", ("learner-0",), direction="sideways"), "direction"),
        (lambda: Bandwidth("f", ("learner-0",), rate_kbps=0), "rate_kbps"),
        (lambda: Bandwidth("f", ("learner-0",), rate_kbps=-5), "rate_kbps"),
        (lambda: Latency("f", ("learner-0",), latency_ms=-1), "latency_ms"),
        (lambda: Latency("f", ("learner-0",), latency_ms=10, jitter_ms=-1), "jitter_ms"),
        (lambda: Latency("f", ("learner-0",), latency_ms=10, jitter_ms=20), "jitter_ms"),
        (lambda: Latency("f", ("learner-0",), latency_ms=1.5), "latency_ms"),  # type: ignore[arg-type]  # as above
        (lambda: ResetPeer("f", ("learner-0",), timeout_ms=-1), "timeout_ms"),
        (lambda: DataLimit("f", ("learner-0",), bytes=0), "bytes"),
        (lambda: LinkDown("f", ()), "targets"),
    ],
)
def test_bad_field_values_are_fault_errors_naming_the_field(make, field: str) -> None:
    with pytest.raises(FaultError, match=f"'{field}'"):
        make()


def test_faults_describe_themselves_and_accept_lists(make_cluster) -> None:
    fault = Latency("d1", ["learner-0"], latency_ms=20, jitter_ms=5, direction="from_syncer")  # type: ignore[arg-type]
    assert fault.targets == ("learner-0",)
    assert "20 ± 5 ms" in fault.describe() and "from syncer" in fault.describe()
    for f in (
        Partition("a", (L0,)),
        LinkDown("b", (L0,)),
        Bandwidth("c", (L0,), rate_kbps=5),
        ResetPeer("e", (L0,)),
        DataLimit("g", (L0,), bytes=10),
    ):
        assert L0 in f.describe() and type(f) in FAULTS


def test_heal_removes_only_its_own_toxics(make_cluster) -> None:
    cluster = make_cluster("echo")
    lat = Latency("mine", (L0,), latency_ms=10)
    bw = Bandwidth("other", (L0,), rate_kbps=1000)
    lat.inject(cluster)
    bw.inject(cluster)
    lat.heal(cluster)
    assert _toxic_names(cluster, L0) == ["chaos-other-down", "chaos-other-up"]
    bw.heal(cluster)
    _assert_clean(cluster)
