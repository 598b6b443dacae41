"""A unit container's health check: healthy while it waits for a run, or while its trainer serves ``/metrics``.

Compose runs it every few seconds in every unit container (``python -m chaos.container_probe``), so it imports
the standard library only (~20 ms; the project's packages would cost 0.4 s of CPU a probe on a 2-core machine).
PID 1 is the unit's waiter (:mod:`chaos.backends.unit`) until a run starts it, then the trainer itself, which
serves ``/metrics`` on :data:`chaos.backends.unit.METRICS_PORT` from its first second: an answer there means the
process is up and its HTTP thread is scheduled (a SIGSTOPped trainer does not answer, and is reported so).

Exit 0: healthy; 1: unhealthy, with the reason on stdout (``docker inspect`` shows it).
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

METRICS_PORT = 9400  # every unit container's /metrics (chaos.backends.unit passes it to the trainer)
WAITER = b"chaos.backends.unit"


def healthy(proc1_cmdline: bytes, fetch_metrics) -> tuple[bool, str]:  # noqa: ANN001 - () -> bytes
    """Whether the unit is healthy, and why (PID 1's command line decides which question to ask).

    >>> healthy(b"python\\0-m\\0chaos.backends.unit\\0syncer\\0", lambda: b"")
    (True, 'waiting for a run')
    >>> healthy(b"python\\0-m\\0trainer.syncer\\0", lambda: b"diloco_merges_total 3\\n")
    (True, 'serving /metrics')
    """
    if WAITER in proc1_cmdline:
        return True, "waiting for a run"
    try:
        body = fetch_metrics()
    except OSError as err:
        return False, f"the trainer does not answer on :{METRICS_PORT}/metrics: {err}"
    return (True, "serving /metrics") if b"diloco_" in body else (False, "/metrics has no diloco_ metrics")


def main() -> int:
    ok, why = healthy(
        Path("/proc/1/cmdline").read_bytes(),
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=2).read(),
    )
    print(why)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
