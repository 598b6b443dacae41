"""The torchft tier's proof that the checks work on a foreign system: each planted defect
(tests/peers/torchft_defects.py) is caught by a check, and the same run unmodified passes.

    .venv-torchft/bin/python -m tests.peers.defects_check [--out DIR]

Exit status 1 otherwise. (Needs torch: scripts/torchft-test runs it.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from peers.torchft.run import ROOT, run

# defect -> the scenario that reaches it (a group must heal to skip healing) and the group it is planted in
PLANTED = {"skips_healing": ("kill-and-rejoin", "learner-1"), "commits_ignored": ("kill-and-rejoin", "learner-1")}


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(prog="python -m tests.peers.defects_check", description=__doc__.splitlines()[0])
    a.add_argument("--out", type=Path, default=ROOT / "runs" / "torchft" / "defects")
    a.add_argument("--inner-steps", type=int, default=480)
    args = a.parse_args(argv)
    ok = True
    clean = run("kill-and-rejoin", args.out / "unmodified", args.inner_steps, 300.0)
    print(f"unmodified kill-and-rejoin: {clean['status']}")
    ok &= clean["status"] == "pass"
    for defect, (scenario, group) in PLANTED.items():
        entry = {group: ["tests.peers.torchft_defects", "--defect", defect]}
        got = run(scenario, args.out / defect, args.inner_steps, 300.0, entry=entry)
        failed = [v["name"] for v in got["verdicts"] if v["status"] == "fail"]  # type: ignore[attr-defined]
        print(
            f"{defect} in {group} on {scenario}: " + (f"caught by {', '.join(failed)}" if failed else "SURVIVES")
        )
        ok &= bool(failed)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
