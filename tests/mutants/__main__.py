"""``.venv/bin/python -m tests.mutants [--seeds N] [--json PATH] [--only NAME ...] [--render]``: the catch matrix.

Runs every scenario the mutants reach without a mutant (each must pass every check), then each mutant on each of
its scenarios at seeds 0..N-1 (0: the scenario file's own; others draw another schedule and data), in deterministic
mode (the mutants whose modes include ``sim``; the real-process ones run nightly: tests/nightly/test_mutants_real.py); prints mutant × scenario × check (FAIL where a check failed) and which mutants survived; writes the matrix to
``benchmarks/results/mutants.json`` (or PATH); ``--render`` also puts it into docs/scenarios-and-checks.md.
Exit status: 0 when every unmutated run passed, 1 otherwise (surviving mutants are reported, not an error here:
tests/mutants/test_mutants.py decides which may survive).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.mutants import render
from tests.mutants.registry import MUTANTS_BY_NAME, SIM_MUTANTS
from tests.mutants.runner import RESULTS_PATH, MutantResult, results_doc, run_matrix, summary, text_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.mutants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 per scenario (default 1: the file's own)")
    ap.add_argument(
        "--json", default=RESULTS_PATH, help=f"where to write the matrix (default {RESULTS_PATH}; '-' for none)"
    )
    ap.add_argument(
        "--only", nargs="+", metavar="NAME", choices=sorted(m.name for m in SIM_MUTANTS), help="these mutants only"
    )
    ap.add_argument(
        "--render", action="store_true", help="also render the matrix into docs/scenarios-and-checks.md"
    )
    args = ap.parse_args(argv)
    mutants = [MUTANTS_BY_NAME[n] for n in args.only] if args.only else list(SIM_MUTANTS)

    def progress(r: MutantResult) -> None:
        caught = f"caught by {', '.join(r.caught_by)}" if r.caught else "SURVIVES"
        print(f"{r.mutant.name}: {caught} ({sum(c.wall_s for c in r.cells):.1f} s)", file=sys.stderr, flush=True)

    matrix = run_matrix(mutants, range(args.seeds), progress)
    print(text_table(matrix))
    print()
    print(summary(matrix))
    print(f"wall time {matrix.wall_s:.1f} s", file=sys.stderr)
    command = " ".join([".venv/bin/python -m tests.mutants", *(argv if argv is not None else sys.argv[1:])])
    if args.json != "-":
        doc = results_doc(matrix, command)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
        if args.render:
            print(f"rendered into {render.update_docs(doc)}", file=sys.stderr)
    return 0 if all(c.status == "pass" for c in matrix.unmutated.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
