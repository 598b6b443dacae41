"""bf16 against fp32 compute on this machine: a jitted AdamW step's time and the loss after a short run, per size.

``model.compute_dtype: bfloat16`` computes the matmuls in bf16 from fp32 master weights. On a CPU without bf16 units
XLA may emulate it, so whether it pays is measured, not assumed: per model size, both dtypes' steps are timed
interleaved (fp32, bf16, fp32, …, one JAX thread, after a warm-up), and each trains ``--steps`` steps from the same
seed on real text to compare the eval loss it reaches.

    .venv/bin/python -m benchmarks.costs.compute_dtype [--sizes tiny,small] [--repeats 5] [--steps 100]

Writes ``benchmarks/results/compute_dtype.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks.common import fmt, markdown_table, write_results

WARMUP = 3


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import jax.numpy as jnp

    from trainer.config import build_config
    from trainer.training import TrainingSetup

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="tiny,small")
    ap.add_argument("--repeats", type=int, default=5, help="timed blocks of 5 steps per dtype, interleaved")
    ap.add_argument("--steps", type=int, default=100, help="training steps for the loss comparison")
    args = ap.parse_args(argv)
    rows = []
    for size in args.sizes.split(","):
        setups = {
            dt: TrainingSetup.from_config(
                build_config({"model": {"size": size, "compute_dtype": dt}, "data": {"source": "text"}})
            )
            for dt in ("float32", "bfloat16")
        }
        state = {}
        for dt, s in setups.items():
            p = {k: jnp.asarray(v) for k, v in s.init_params().items()}
            state[dt] = [p, s.optimizer.init(p), s.batches("learner-0", 0)]
        times: dict[str, list[float]] = {dt: [] for dt in setups}
        for rep in range(WARMUP + args.repeats):
            for dt, s in setups.items():
                p, o, b = state[dt]
                t0 = time.perf_counter()
                for _ in range(5):
                    p, o, loss = s.train_step(p, o, jnp.asarray(next(b)))
                float(loss)
                if rep >= WARMUP:
                    times[dt].append((time.perf_counter() - t0) / 5)
                state[dt][:2] = [p, o]
        for _ in range(args.steps):
            for dt, s in setups.items():
                p, o, b = state[dt]
                p, o, _ = s.train_step(p, o, jnp.asarray(next(b)))
                state[dt][:2] = [p, o]
        losses = {dt: setups[dt].evaluate(state[dt][0]) for dt in setups}
        med = {dt: statistics.median(v) for dt, v in times.items()}
        row = {
            "size": size,
            "step_s": med,
            "bf16_over_fp32": med["bfloat16"] / med["float32"],
            "eval_loss": losses,
            "steps_trained": WARMUP * 5 + args.repeats * 5 + args.steps,
        }
        print(row, flush=True)
        rows.append(row)
    table = markdown_table(
        ("size", "fp32 step s", "bf16 step s", "bf16 ÷ fp32", "eval loss fp32 / bf16: one seed, a sanity check"),
        [
            (
                r["size"],
                fmt(r["step_s"]["float32"], 4),
                fmt(r["step_s"]["bfloat16"], 4),
                f"{r['bf16_over_fp32']:.2f}",
                f"{r['eval_loss']['float32']:.4f} / {r['eval_loss']['bfloat16']:.4f} ({r['steps_trained']} steps)",
            )
            for r in rows
        ],
    )
    print(table)
    write_results(
        "compute_dtype",
        config={"sizes": args.sizes.split(","), "repeats": args.repeats, "steps": args.steps},
        results={"rows": rows},
        table=table,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
