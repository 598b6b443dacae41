"""Shared test setup: one JAX thread per process (the machine has two cores), and a real Toxiproxy server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from faults.toxiproxy_server import ToxiproxyServer  # noqa: E402 - after the JAX environment is set

# Hypothesis: the plugin's profile `chaos` (pyproject's addopts; the nightly tier passes `chaos-nightly`): no
# per-example deadline (the machine is shared and noisy, and a slow example is not a failure), derandomized.


@pytest.fixture(scope="module")
def toxiproxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToxiproxyServer]:
    """A real ``toxiproxy-server`` on a free port, for one test module; its log is in the module's tmp dir.

    Fails (does not skip) when the binary is missing: the message says to run scripts/install-toxiproxy.
    """
    log = tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log"
    with ToxiproxyServer(log_path=log) as server:
        yield server
