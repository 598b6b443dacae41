"""Fixtures shared by the integration modules."""

from __future__ import annotations

import pytest

from tests.integration.tiny_runs import TinyRuns


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRuns:
    """Launches each of ``tiny_runs.TINY_RUNS`` once a session, on first use."""
    return TinyRuns(tmp_path_factory.mktemp("tiny-runs"))
