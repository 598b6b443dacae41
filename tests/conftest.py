"""Shared test setup: one JAX thread per process (the machine has two cores), and one real Toxiproxy server a test
module, with a client that leaves it empty."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from chaos.pytest_plugin import OPTIONS  # noqa: E402 - after the JAX environment is set
from faults.toxiproxy import Toxiproxy  # noqa: E402
from faults.toxiproxy_server import RunningToxiproxy, ToxiproxyServer  # noqa: E402

# Hypothesis: the plugin's profile `chaos` (pyproject's addopts; the nightly tier passes `chaos-nightly`): no
# per-example deadline (the machine is shared and noisy, and a slow example is not a failure), derandomized.


@pytest.fixture(scope="module")
def toxiproxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToxiproxyServer]:
    """The suite's Toxiproxy server: a real ``toxiproxy-server`` on a free port, one for each test module (under
    pytest-xdist's ``--dist loadfile``, a module's tests share one worker, so one per module and worker), whichever
    of this fixture, :func:`toxiproxy` or the plugin's ``chaos_toxiproxy`` its tests ask for; its log is in the
    module's tmp dir. A module of its own keeps one module's leftovers out of the next one's exact checks.

    Fails (does not skip) when the binary is missing: the message says to run scripts/install-toxiproxy.
    """
    log = tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log"
    with ToxiproxyServer(log_path=log) as server:
        yield server


@pytest.fixture
def toxiproxy(toxiproxy_server: ToxiproxyServer) -> Iterator[Toxiproxy]:
    """A client of the module's server (5 s API timeout); every proxy on the server is deleted after the test, so
    that the next test finds it empty."""
    client = toxiproxy_server.client(timeout_s=5.0)
    yield client
    for name in client.proxies():
        client.delete_proxy(name)


@pytest.fixture(scope="module")
def chaos_toxiproxy(request: pytest.FixtureRequest) -> ToxiproxyServer | RunningToxiproxy:
    """The plugin's ``chaos_toxiproxy`` (what its ``chaos_cluster`` and ``run_chaos`` use), in this suite: the
    module's :func:`toxiproxy_server`, not a second server for the session; or, as the plugin's fixture does, the
    running server ``--chaos-toxiproxy-url`` (``$DILOCO_TOXIPROXY_URL``) names. The plugin's own fixture is
    tested in inner sessions (tests/integration/test_plugin_cluster.py)."""
    if OPTIONS.toxiproxy_url:
        return RunningToxiproxy.check(OPTIONS.toxiproxy_url)
    return request.getfixturevalue("toxiproxy_server")
