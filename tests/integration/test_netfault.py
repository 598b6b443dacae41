"""The Kubernetes export's connection faults, run for real: the exact shell commands a Workflow's exec steps run in
a learner pod's netfault sidecar (chaos.k8s.netfault), here against a loopback TCP connection on this machine.

They need root (CAP_NET_ADMIN), ``ss`` and ``iptables``, as the sidecar has them; the test fails, naming what is
missing, where they are not. Each rule and loop is scoped to the test's own port and removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from chaos.k8s.netfault import data_limit_commands, reset_peer_commands
from faults import procfs
from tests.support import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _tools() -> None:
    missing = [t for t in ("ss", "iptables") if shutil.which(t) is None]
    assert not missing and os.geteuid() == 0, (
        f"the netfault commands need root and {missing or 'ss, iptables'} (the sidecar image has them): "
        "run the tests as root with iproute2 and iptables installed"
    )


class Server:
    """A loopback TCP server that drains what it is sent and answers each connection with ``reply`` bytes."""

    def __init__(self, reply: int = 0) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.received: list[int] = []  # bytes per connection
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        i = len(self.received)
        self.received.append(0)
        try:
            if self.reply:
                conn.sendall(b"r" * self.reply)
            while data := conn.recv(65536):
                self.received[i] += len(data)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def _sh(script: str) -> None:
    subprocess.run(["sh", "-c", script], check=True, timeout=30)


def _fresh_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _send(port: int, total: int, chunk: int = 100) -> tuple[int, OSError | None]:
    """Send ``total`` bytes in ``chunk``s, paced; (bytes sent, the error that stopped it).

    From a source port no earlier connection of the test used: conntrack keeps a closed connection's byte count
    for a while, and on loopback Linux may reuse a TIME_WAIT port (tcp_tw_reuse), so a new connection on the same
    4-tuple would start over the limit."""
    sent = 0
    try:  # the syncer's side may send first: a reset can come before connect() returns
        c = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.1", _fresh_port()))
    except ConnectionResetError as err:
        return sent, err
    with c:
        try:
            while sent < total:
                c.sendall(b"x" * chunk)
                sent += chunk
                time.sleep(0.005)
            c.shutdown(socket.SHUT_WR)
            while c.recv(65536):  # to the end: the server closes after draining (a reset shows here too)
                pass
        except OSError as err:
            return sent, err
    return sent, None


def _held_open(port: int, seconds: float) -> OSError | None:
    """Keep a connection open for ``seconds``, writing a byte every 50 ms; the error that ended it, if any. The
    reset loop may abort the socket while it is still connecting (seen under CPU load): that error counts too."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                c.sendall(b"x")
                time.sleep(0.05)
    except OSError as err:
        return err
    return None


def _loops(flag: str) -> list[int]:
    """The reset loops running: processes whose command line names ``flag`` and whose parent does not. A loop's
    shell forks copies of itself (same command line) for each ``$(date ...)``, so a plain count sees two at times
    under CPU load; such a copy may also exit before its parent is read (parent 0: gone, not a loop)."""
    pids = procfs.matching(flag)
    return [p for p in pids if procfs.parent(p) not in (0, *pids)]


def test_reset_peer_resets_every_connection_until_the_heal_and_none_after(server: Server) -> None:
    inject, heal = reset_peer_commands("t-reset", server.port, timeout_ms=0, seconds=30)
    _sh(heal)  # nothing left from an earlier run
    assert _held_open(server.port, 0.5) is None  # control: without the fault the connection lives
    _sh(inject)
    try:
        _sh(inject)  # a retried step starts no second loop
        assert len(_loops("diloco-reset-t-reset")) == 1, procfs.matching("diloco-reset-t-reset")
        for _ in range(2):  # the first connection, and the reconnection after it
            err = _held_open(server.port, 3.0)
            assert isinstance(err, (ConnectionAbortedError, ConnectionResetError, BrokenPipeError)), err
    finally:
        _sh(heal)
    assert _held_open(server.port, 1.0) is None  # healed: nothing resets it now
    wait_until(
        lambda: not procfs.matching("diloco-reset-t-reset"),
        5,
        "the reset loop gone after the heal",
    )


@pytest.mark.parametrize("direction", ["to_syncer", "from_syncer", "both"])
def test_data_limit_resets_a_connection_after_its_bytes_and_the_heal_removes_the_rule(direction: str) -> None:
    server = Server(reply=4000 if direction != "to_syncer" else 0)
    inject, heal = data_limit_commands(server.port, 2000, direction)
    try:
        _sh(heal)
        assert _send(server.port, 3000) == (3000, None)  # control: no limit, every byte through
        _sh(inject)
        _sh(inject)  # idempotent: one rule
        rules = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True, check=True).stdout
        assert rules.count(f"--dport {server.port} ") == 1, rules
        if direction == "from_syncer":  # the server's 4000-byte reply crosses the limit: the learner end resets
            sent, err = _send(server.port, 3000)
            assert isinstance(err, ConnectionResetError), (sent, err)
        else:
            sent, err = _send(server.port, 6000)
            assert isinstance(err, ConnectionResetError) and sent < 6000, (sent, err)
            assert max(server.received[1:], default=0) <= 2000, server.received  # none past the limit got through
        _sh(heal)
        assert (
            f"--dport {server.port} "
            not in subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True, check=True).stdout
        )
        assert _send(server.port, 3000) == (3000, None)
    finally:
        _sh(heal)
        server.close()
