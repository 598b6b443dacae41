"""CPU load like a shared CI runner's: busy processes on every core, seeded, always stopped.

A verdict that holds only on an idle machine is not a verdict. :class:`CpuLoad` starts ``hogs`` processes
(default: one per core) that alternate seeded busy and idle spells, mostly busy, so the load is uneven like a
real neighbour's. They die with this process (PR_SET_PDEATHSIG on Linux), and leaving the context stops them
on every exit path. Measurement machinery, not the harness: ``benchmarks.costs.under_load``,
``benchmarks.calibration.parity_false_alarm`` and the tests that judge verdicts under load use it.

Example:
    with CpuLoad(seed=7) as load:
        run_the_chaos_suite()
    assert not load.running()
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field

from trainer.lifeline import guarded

# Each hog: seeded busy spells of 0.5-3 s with idle gaps of 0-0.4 s (the shape of ../shared/tools/under-load).
_HOG = """
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    end = time.monotonic() + rng.uniform(0.5, 3.0)
    while time.monotonic() < end:
        sum(i * i for i in range(10_000))
    time.sleep(rng.uniform(0.0, 0.4))
"""


@dataclass
class CpuLoad:
    """``hogs`` busy processes (None: one per core), hog i seeded with ``seed * 1000 + i``."""

    seed: int = 0
    hogs: int | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def start(self) -> CpuLoad:
        if self.procs:
            raise RuntimeError("this CpuLoad is already running")
        n = self.hogs if self.hogs is not None else (os.cpu_count() or 1)
        try:
            for i in range(1, n + 1):
                self.procs.append(
                    subprocess.Popen(
                        guarded([sys.executable, "-c", _HOG, str(self.seed * 1000 + i)], os.getpid()),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
        except BaseException:
            self.stop()
            raise
        return self

    def running(self) -> int:
        """How many hogs are still running."""
        return sum(1 for p in self.procs if p.poll() is None)

    def stop(self) -> None:
        """Kill every hog and reap it; idempotent."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait(10)

    def __enter__(self) -> CpuLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
