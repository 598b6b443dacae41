"""Fixtures shared by integration tests: a real Toxiproxy server per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from faults.toxiproxy import ToxiproxyServer


@pytest.fixture(scope="module")
def toxiproxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToxiproxyServer]:
    """A real ``toxiproxy-server`` on a free port, for one test module; its log is in the module's tmp dir.

    Fails (does not skip) when the binary is missing: the message says to run scripts/install-toxiproxy.
    """
    log = tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log"
    with ToxiproxyServer(log_path=log) as server:
        yield server
