"""Process faults from inside a pod: what a Chaos Mesh Workflow's ``Task`` steps run (``kubectl exec``).

Chaos Mesh has no experiment that freezes a process or restarts a learner corrupt, so the Kubernetes export
(:mod:`chaos.k8s.chaos_mesh`) runs these in the trainer's pod instead, the same signals as the local and
Docker backends send. The pods share one process namespace (``shareProcessNamespace``), so the trainer is not
PID 1 there (a namespace's PID 1 ignores SIGSTOP from inside it) and is found by its command line. Run it only
in a pod: on a host it would signal every trainer the host can see (a compose deployment's included).

    python -m faults.in_pod stop | cont                         pause: SIGSTOP / SIGCONT the trainer
    python -m faults.in_pod slow --fraction F --period P --seconds S   frozen F of every P seconds, for S seconds
    python -m faults.in_pod corrupt MODE | healthy               restart it corrupt (MODE) / healthy again

``corrupt`` writes MODE to the learner's ``--corrupt-file`` and SIGKILLs it: the kubelet restarts the container,
and the new learner reads the file; ``healthy`` removes the file and does the same. Standard library only (and
:mod:`faults.procfs`, which is too): it runs in the trainer's image, beside the trainer, and must start in
milliseconds.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from faults import procfs

TRAINERS = ("trainer.learner", "trainer.syncer")
CORRUPT_FILE = Path("/data/corrupt")  # on the pod's volume: it outlives the container restart


def trainer_pids(proc: Path = procfs.PROC) -> list[int]:
    """The trainer processes visible here (their command line runs trainer.learner or trainer.syncer)."""
    return list(procfs.find(lambda argv: any(a in TRAINERS for a in argv), proc))


def signal_trainer(sig: int, proc: Path = procfs.PROC) -> list[int]:
    pids = trainer_pids(proc)
    if not pids:
        raise SystemExit("error: no trainer process here (is the pod's process namespace shared?)")
    for pid in pids:
        os.kill(pid, sig)
    return pids


def slow(fraction: float, period_s: float, seconds: float, proc: Path = procfs.PROC) -> None:
    """Freeze the trainer ``fraction`` of every ``period_s`` for ``seconds``; it always ends running."""
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            signal_trainer(signal.SIGSTOP, proc)
            time.sleep(period_s * fraction)
            signal_trainer(signal.SIGCONT, proc)
            time.sleep(period_s * (1 - fraction))
    finally:
        signal_trainer(signal.SIGCONT, proc)


def restart(mode: str | None, flag: Path = CORRUPT_FILE, proc: Path = procfs.PROC) -> None:
    """Restart the learner corrupt (``mode``) or healthy (None): the flag its next start reads, then SIGKILL."""
    if mode is None:
        flag.unlink(missing_ok=True)
    else:
        flag.write_text(mode)
    signal_trainer(signal.SIGKILL, proc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m faults.in_pod", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="action", required=True)
    sub.add_parser("stop")
    sub.add_parser("cont")
    s = sub.add_parser("slow")
    s.add_argument("--fraction", type=float, required=True)
    s.add_argument("--period", type=float, required=True)
    s.add_argument("--seconds", type=float, required=True)
    c = sub.add_parser("corrupt")
    c.add_argument("mode")
    sub.add_parser("healthy")
    args = ap.parse_args(argv)
    if args.action == "stop":
        signal_trainer(signal.SIGSTOP)
    elif args.action == "cont":
        signal_trainer(signal.SIGCONT)
    elif args.action == "slow":
        slow(args.fraction, args.period, args.seconds)
    elif args.action == "corrupt":
        restart(args.mode)
    else:
        restart(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
