"""The learner's command line: with --no-exit-on-finish a finished learner waits for SIGTERM (Kubernetes restarts a
container that exits, even with 0; chaos.k8s.manifests), and without it, or when stopped by a signal, it exits."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from trainer import learner as learner_mod


class _Finishes:
    """Stands in for the Learner: its run ends at once, as a learner's does when the syncer says the budget is in."""

    def __init__(self, *args, **kw) -> None:  # noqa: ANN002, ANN003 - the Learner's signature
        pass

    def run(self, stop: threading.Event) -> str:
        return "finished"


ARGS = ["--id", "learner-0", "--syncer", "127.0.0.1:9", "--metrics-port", "0"]


@pytest.fixture
def finishing(tmp_path, monkeypatch):
    monkeypatch.setattr(learner_mod, "Learner", _Finishes)
    monkeypatch.setattr(learner_mod, "expose", lambda *a, **k: None)
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield [*ARGS, "--run-dir", str(tmp_path)]
    for s, handler in old.items():
        signal.signal(s, handler)


def test_a_finished_learner_waits_for_sigterm_when_told_to(finishing):
    sent: list[float] = []

    def terminate() -> None:
        time.sleep(1.0)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate, daemon=True).start()
    assert learner_mod.main([*finishing, "--no-exit-on-finish"]) == 0
    assert sent, "main returned before SIGTERM"  # it waited for the signal


def test_a_finished_learner_exits_by_default(finishing):
    t0 = time.monotonic()
    assert learner_mod.main(finishing) == 0
    assert time.monotonic() - t0 < 1.0


def test_a_sync_thread_is_named_where_the_os_shows_it() -> None:
    """A profile (or benchmarks.costs.learner_overhead) tells the learner's sync threads from the step loop by the
    name in /proc/<pid>/task/<tid>/comm; names longer than the OS's 15 bytes are cut, not refused."""
    seen: list[str] = []

    def run(name: str) -> None:
        learner_mod.name_os_thread(name)
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
            seen.append(f.read().strip())

    for name in ("sync-upload", "sync-download-12345"):
        t = threading.Thread(target=run, args=(name,))
        t.start()
        t.join()
    assert seen == ["sync-upload", "sync-download-1"]
