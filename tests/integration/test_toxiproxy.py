"""Our Toxiproxy client and server lifecycle against the real toxiproxy-server, plus the gaps of toxiproxy-python."""

from __future__ import annotations

import os
import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import faults.toxiproxy_server as toxiproxy_server_module
from faults import procfs
from faults.errors import ToxiproxyError, ToxiproxyNotInstalled
from faults.toxiproxy import ProxySpec, Toxic, Toxiproxy, ToxiproxyApiError
from faults.toxiproxy_server import ToxiproxyServer
from tests.support import EchoHandler, wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def echo_addr() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), EchoHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _roundtrip(port: int, payload: bytes = b"ping") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2.0) as s:
        s.sendall(payload)
        return s.recv(len(payload))


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that completes the TCP handshake (kernel backlog) but never answers a byte."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()  # pending connections get a reset, which unblocks any client still waiting


def test_version(toxiproxy: Toxiproxy) -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+|git", toxiproxy.version())


def test_create_get_list_delete_proxy(toxiproxy: Toxiproxy, echo_addr: str) -> None:
    info = toxiproxy.create_proxy("c1", "127.0.0.1:0", echo_addr)
    assert info.name == "c1" and info.upstream == echo_addr and info.enabled and info.port != 0
    assert toxiproxy.get_proxy("c1") == info
    assert toxiproxy.proxies() == {"c1": info}
    assert _roundtrip(info.port) == b"ping"  # it really forwards

    with pytest.raises(ToxiproxyApiError, match="proxy already exists") as dup:
        toxiproxy.create_proxy("c1", "127.0.0.1:0", echo_addr)
    assert dup.value.status == 409

    assert toxiproxy.delete_proxy("c1") is True
    assert toxiproxy.delete_proxy("c1") is False  # idempotent
    with pytest.raises(ToxiproxyApiError, match="GET /proxies/c1 failed with HTTP 404: proxy not found"):
        toxiproxy.get_proxy("c1")


def test_populate_is_idempotent_and_keeps_live_connections(toxiproxy: Toxiproxy, echo_addr: str) -> None:
    (first,) = toxiproxy.populate([ProxySpec("pop", "127.0.0.1:0", echo_addr)])  # the server picks the port
    port = first.port
    spec = ProxySpec("pop", f"127.0.0.1:{port}", echo_addr)
    assert first.listen == f"127.0.0.1:{port}" and first.enabled and port > 0

    with socket.create_connection(("127.0.0.1", port), timeout=2.0) as live:
        live.sendall(b"a")
        assert live.recv(1) == b"a"
        # Same proxy again, even spelled with a hostname: the server resolves and keeps it (and the connection).
        assert toxiproxy.populate([spec]) == [first]
        assert toxiproxy.populate([ProxySpec("pop", f"localhost:{port}", echo_addr)]) == [first]
        live.sendall(b"b")
        assert live.recv(1) == b"b"

    # The server ignores ``enabled`` for a proxy it keeps; our populate applies it.
    toxiproxy.set_enabled("pop", False)
    (again,) = toxiproxy.populate([spec])
    assert again.enabled and toxiproxy.get_proxy("pop").enabled

    # A differing upstream replaces the proxy.
    (replaced,) = toxiproxy.populate([ProxySpec("pop", f"127.0.0.1:{port}", "127.0.0.1:9")])
    assert replaced.upstream == "127.0.0.1:9"


def test_set_upstream_repoints_a_proxy_on_the_same_port(toxiproxy: Toxiproxy, echo_addr: str) -> None:
    info = toxiproxy.create_proxy("up", "127.0.0.1:0", "127.0.0.1:9")
    toxiproxy.add_toxic("up", Toxic("lat", "latency", "downstream", attributes={"latency": 10, "jitter": 0}))
    moved = toxiproxy.set_upstream("up", echo_addr)
    assert moved.upstream == echo_addr and moved.port == info.port and moved.enabled
    assert [(t.name, t.type, t.attributes["latency"]) for t in moved.toxics] == [("lat", "latency", 10)]
    assert _roundtrip(info.port) == b"ping"
    toxiproxy.set_enabled("up", False)  # an active link-down stays down
    assert toxiproxy.set_upstream("up", "127.0.0.1:9").enabled is False


def test_reenabling_waits_out_a_port_held_for_a_moment(toxiproxy: Toxiproxy, echo_addr: str) -> None:
    info = toxiproxy.create_proxy("hold", "127.0.0.1:0", echo_addr)
    toxiproxy.set_enabled("hold", False)
    squatter = socket.socket()  # e.g. another process probing for a free port
    squatter.bind(("127.0.0.1", info.port))
    squatter.listen(1)
    release = threading.Timer(0.5, squatter.close)
    release.start()
    try:
        assert toxiproxy.set_enabled("hold", True, rebind_s=5.0).enabled
    finally:
        release.cancel()
        squatter.close()
    assert _roundtrip(info.port) == b"ping"


def test_set_enabled_uses_patch_and_really_closes_the_listener(toxiproxy: Toxiproxy, echo_addr: str) -> None:
    info = toxiproxy.create_proxy("en", "127.0.0.1:0", echo_addr)
    assert toxiproxy.set_enabled("en", False).enabled is False
    assert toxiproxy.set_enabled("en", False).enabled is False  # idempotent
    with pytest.raises(ConnectionRefusedError):
        _roundtrip(info.port)
    assert toxiproxy.set_enabled("en", True).enabled is True
    assert _roundtrip(info.port) == b"ping"


def test_toxic_add_update_remove(toxiproxy: Toxiproxy, echo_addr: str) -> None:
    toxiproxy.create_proxy("tx", "127.0.0.1:0", echo_addr)
    lat = Toxic("lat", "latency", "downstream", attributes={"latency": 5})
    added = toxiproxy.add_toxic("tx", lat)
    assert (added.type, added.stream, added.toxicity) == ("latency", "downstream", 1.0)
    assert added.attributes == {"latency": 5, "jitter": 0}  # the server fills in defaults

    assert toxiproxy.add_toxic("tx", lat) == added  # duplicate add: idempotent
    assert toxiproxy.toxics("tx") == [added]

    changed = toxiproxy.add_toxic(
        "tx", Toxic("lat", "latency", "downstream", attributes={"latency": 9, "jitter": 2})
    )
    assert changed.attributes == {"latency": 9, "jitter": 2} and len(toxiproxy.toxics("tx")) == 1

    patched = toxiproxy.update_toxic("tx", "lat", {"latency": 20})
    assert patched.attributes == {"latency": 20, "jitter": 2}  # PATCH keeps attributes not named

    other = toxiproxy.add_toxic("tx", Toxic("lat", "timeout", "upstream", attributes={"timeout": 0}))
    assert (other.type, other.stream) == ("timeout", "upstream") and toxiproxy.toxics("tx") == [other]

    assert toxiproxy.remove_toxic("tx", "lat") is True
    assert toxiproxy.remove_toxic("tx", "lat") is False  # idempotent
    assert toxiproxy.remove_toxic("no-such-proxy", "lat") is False
    assert toxiproxy.toxics("tx") == []


def test_server_errors_become_toxiproxy_errors_with_the_server_message(toxiproxy: Toxiproxy) -> None:
    with pytest.raises(ToxiproxyApiError) as err:
        toxiproxy.add_toxic("nope", Toxic("t", "latency", "upstream", attributes={"latency": 1}))
    assert err.value.status == 404
    assert "POST /proxies/nope/toxics" in str(err.value) and "proxy not found" in str(err.value)
    assert isinstance(err.value, ToxiproxyError)

    toxiproxy.create_proxy("bad", "127.0.0.1:0", "127.0.0.1:9")
    with pytest.raises(ToxiproxyApiError, match="invalid toxic type"):
        toxiproxy.add_toxic("bad", Toxic("t", "no_such_toxic", "upstream"))
    with pytest.raises(ToxiproxyApiError, match="stream was invalid"):
        toxiproxy.add_toxic("bad", Toxic("t", "latency", "sideways"))


def test_a_negative_bandwidth_rate_is_refused_before_it_crashes_the_server(toxiproxy: Toxiproxy) -> None:
    toxiproxy.create_proxy("neg", "127.0.0.1:0", "127.0.0.1:9")
    with pytest.raises(ToxiproxyError, match="crashes toxiproxy-server"):
        toxiproxy.add_toxic("neg", Toxic("bw", "bandwidth", "downstream", attributes={"rate": -5}))
    toxiproxy.add_toxic("neg", Toxic("bw", "bandwidth", "downstream", attributes={"rate": 5}))
    with pytest.raises(ToxiproxyError, match="crashes toxiproxy-server"):
        toxiproxy.update_toxic("neg", "bw", {"rate": -1})
    assert toxiproxy.toxics("neg")[0].attributes == {"rate": 5}


def test_a_server_that_never_answers_times_out(silent_port: int) -> None:
    client = Toxiproxy(f"http://127.0.0.1:{silent_port}", timeout_s=0.5)
    start = time.monotonic()
    with pytest.raises(ToxiproxyError, match="is not answering"):
        client.version()
    assert time.monotonic() - start < 5.0


def test_no_server_fails_fast_and_says_how_to_start_one() -> None:
    with socket.socket() as held, pytest.raises(ToxiproxyError, match="ToxiproxyServer") as err:
        held.bind(("127.0.0.1", 0))  # bound, not listening: refused for as long as we hold it
        Toxiproxy(f"http://127.0.0.1:{held.getsockname()[1]}", timeout_s=2.0).proxies()
    assert "not answering" in str(err.value) and "scripts/install-toxiproxy" in str(err.value)


def test_reset_removes_every_toxic_and_enables_every_proxy(toxiproxy: Toxiproxy, echo_addr: str) -> None:
    a = toxiproxy.create_proxy("ra", "127.0.0.1:0", echo_addr)
    toxiproxy.create_proxy("rb", "127.0.0.1:0", echo_addr)
    toxiproxy.add_toxic("ra", Toxic("cut", "timeout", "upstream", attributes={"timeout": 0}))
    toxiproxy.add_toxic("rb", Toxic("slow", "latency", "downstream", attributes={"latency": 50}))
    toxiproxy.set_enabled("rb", False)
    toxiproxy.reset()
    assert all(p.enabled and not p.toxics for p in toxiproxy.proxies().values())
    assert _roundtrip(a.port) == b"ping"


# -- the server process ---------------------------------------------------------------------------------------


def test_server_start_stop_is_idempotent_and_leaves_nothing(tmp_path: Path) -> None:
    server = ToxiproxyServer(log_path=tmp_path / "tp.log")
    with server:
        assert server.running() and server.client().version()
        url = server.url
    assert not server.running()
    assert server.stop() is not None  # second stop: fine
    with pytest.raises(ToxiproxyError, match="not answering"):
        Toxiproxy(url, timeout_s=1.0).version()
    assert "Starting Toxiproxy" in (tmp_path / "tp.log").read_text()


def test_server_on_a_taken_port_fails_clearly(silent_port: int) -> None:
    server = ToxiproxyServer(startup_timeout_s=5.0)
    with pytest.raises(ToxiproxyError, match="did not start") as err:
        server.start(port=silent_port)
    assert "address already in use" in str(err.value)
    assert not server.running()


def test_find_binary_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOXIPROXY_SERVER", str(tmp_path / "missing"))
    with pytest.raises(ToxiproxyNotInstalled, match="scripts/install-toxiproxy"):
        ToxiproxyServer.find_binary()
    monkeypatch.delenv("TOXIPROXY_SERVER")
    monkeypatch.setattr(toxiproxy_server_module, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToxiproxyNotInstalled, match="scripts/install-toxiproxy"):
        ToxiproxyServer.find_binary()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_server_dies_with_its_parent_even_on_sigkill() -> None:
    code = (
        "import time; from faults.toxiproxy_server import ToxiproxyServer; s = ToxiproxyServer().start(); "
        "print(s.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert procfs.alive(child)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
    wait_until(lambda: not procfs.alive(child), 10, f"toxiproxy-server pid {child} to die with its parent")


# -- why not toxiproxy-python: verified gaps ------------------------------------------------------------------


@pytest.fixture
def py_client(toxiproxy_server: ToxiproxyServer) -> Iterator[object]:
    """toxiproxy-python pointed at our server. Its host/port are class-level globals, so restore them after."""
    from toxiproxy.api import APIConsumer
    from toxiproxy.server import Toxiproxy as PyToxiproxy

    saved = APIConsumer.host, APIConsumer.port
    client = PyToxiproxy()
    client.update_api_consumer(toxiproxy_server.host, toxiproxy_server.port)
    yield client
    APIConsumer.host, APIConsumer.port = saved


def test_gap_toxiproxy_python_swallows_a_server_500(py_client, toxiproxy: Toxiproxy, echo_addr: str) -> None:
    port = toxiproxy.create_proxy("gap", "127.0.0.1:0", echo_addr).port
    proxy = py_client.get_proxy("gap")
    proxy.disable()
    with socket.socket() as squatter:  # take the proxy's port while it is down: re-enabling must fail
        squatter.bind(("127.0.0.1", port))
        squatter.listen(1)
        proxy.enable()  # the server answers 500 ... and toxiproxy-python returns normally
        assert proxy.enabled is True  # it even believes the proxy is up
        assert toxiproxy.get_proxy("gap").enabled is False  # the server says otherwise
        with pytest.raises(ToxiproxyApiError, match="address already in use") as err:
            toxiproxy.set_enabled("gap", True)  # ours raises, with the server's reason
        assert err.value.status == 500


def test_gap_toxiproxy_python_has_no_timeout(py_client, silent_port: int) -> None:
    from toxiproxy.api import APIConsumer

    APIConsumer.port = silent_port
    done = threading.Event()
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(APIConsumer.get("/version"))
        except Exception as err:  # noqa: BLE001 - whatever it raises once the socket is closed
            outcome.append(err)
        done.set()

    threading.Thread(target=call, daemon=True).start()
    # Ours gives up after its timeout (0.5 s here); toxiproxy-python is still waiting well after that.
    with pytest.raises(ToxiproxyError):
        Toxiproxy(f"http://127.0.0.1:{silent_port}", timeout_s=0.5).version()
    assert not done.wait(2.0), f"toxiproxy-python returned instead of hanging: {outcome}"


def test_the_server_counts_each_proxys_bytes_for_prometheus(tmp_path: Path, echo_addr: str) -> None:
    """Started with -proxy-metrics (and a seed): GET /metrics has the proxy's byte counters, in Prometheus's format."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    def received(text: str) -> dict:
        return {
            (tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "toxiproxy_proxy_received_bytes_total" and s.labels.get("proxy") == "m1"
        }

    with ToxiproxyServer(log_path=tmp_path / "toxiproxy.log", seed=7) as server:
        info = server.client().create_proxy("m1", "127.0.0.1:0", echo_addr)
        assert _roundtrip(info.port, b"x" * 1000) == b"x" * 1000
        # The server counts a link's bytes as it closes, after the echo has come back: on a loaded machine the
        # first scrape can come before (per-change tier, 2026-12-03). Scrape until the counter is there.
        texts = []

        def counted() -> bool:
            texts.append(urllib.request.urlopen(f"{server.url}/metrics", timeout=5).read().decode())
            return bool(received(texts[-1]))

        wait_until(counted, 10, "the proxy's byte counter in /metrics")
    assert max(received(texts[-1]).values()) >= 1000, texts[-1][-2000:]
