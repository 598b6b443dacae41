"""No port races: every server binds its own port, and a taken port fails loudly or moves, never silently."""

from __future__ import annotations

import socket

import pytest

from chaos.backends.local import LocalBackend
from faults.base import SYNCER
from tests.support import tiny_config, wait_until
from trainer.client import SyncClient
from trainer.errors import AddressInUse
from trainer.launch import LocalCluster
from trainer.syncer import serve

pytestmark = pytest.mark.integration


def _cfg():
    return tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 2, "syncer.checkpoint_every_merges": 5})


def _held_port(s: socket.socket) -> int:
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s.getsockname()[1]


def test_two_syncers_cannot_share_a_port(tmp_path):
    # gRPC's default SO_REUSEPORT let a second server bind a live server's port and take half its calls.
    server, svc, port = serve(_cfg(), tmp_path / "a", host="127.0.0.1", port=0, token="t")
    try:
        with pytest.raises(AddressInUse, match=f"127.0.0.1:{port}.*--port"):
            serve(_cfg(), tmp_path / "b", host="127.0.0.1", port=port, token="t")
    finally:
        svc.shutdown("test over")
        server.stop(0).wait(5)


def test_a_syncer_started_on_a_taken_port_says_so(tmp_path):
    cluster = LocalCluster(_cfg(), tmp_path / "run")
    with socket.socket() as squatter:
        port = _held_port(squatter)
        try:
            with pytest.raises(AddressInUse, match=str(port)):
                cluster.start_syncer(port=port)
        finally:
            codes = cluster.stop_all()
    assert codes["syncer"] == AddressInUse.EXIT_CODE


def test_a_restarted_syncer_whose_port_was_taken_moves_and_the_proxies_follow(tmp_path, toxiproxy):
    backend = LocalBackend(_cfg(), tmp_path / "run", toxiproxy)
    try:
        backend.bring_up()
        first = backend.port
        assert first > 0 and all(p > 0 for p in backend.proxy_ports.values())
        backend.procs.kill(SYNCER)
        with socket.socket() as squatter:
            # Someone took the port while the syncer was down. (Bound, not listening: one that listens and
            # never accepts stalls Toxiproxy's dials, and with them its DELETE, past the API timeout.)
            squatter.bind(("127.0.0.1", first))
            backend.start(SYNCER)
            assert backend.port not in (0, first)
            for lid, port in backend.proxy_ports.items():
                assert toxiproxy.get_proxy(backend.proxy(lid)).upstream == f"127.0.0.1:{backend.port}"
                with SyncClient(f"127.0.0.1:{port}", backend.procs.token, timeout_s=5.0) as via_proxy:
                    assert wait_until(lambda: via_proxy.status(), 60, f"the syncer through {lid}'s proxy")
    finally:
        result = backend.teardown()
    assert all(code is not None for code in result.exit_codes.values())
