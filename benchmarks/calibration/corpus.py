"""The real-text corpus measured: its size and split, the entropy bounds compressors give, the eval set's error.

Real text has no known entropy floor. What compressors achieve bounds it from above (a compressor is a model):
zlib, bz2 and xz at their strongest settings on the whole corpus, and xz on the held-out split given the training
split (the bytes compressing the two together adds to compressing the training split alone): closer to what a model
that learnt from the training split faces.

The eval set's standard error is measured on trained models, not assumed: ``--runs`` single-learner AdamW runs of
``--steps`` steps at seeds 0, 1, … on the training split, each evaluated window by window on the whole held-out split.
Windows of one held-out block share their text, so the error is a cluster standard error over blocks:
``sd(block means) / √blocks``. Two errors matter: one model's loss as an estimate of its loss on text like this
(unpaired), and the difference between two runs judged on the same windows (paired: what a comparison at equal
data sees, since every seed is judged on the same split).

    .venv/bin/python -m benchmarks.calibration.corpus [--size small] [--steps 300] [--runs 2]
    .venv/bin/python -m benchmarks.calibration.corpus --from-runs /work/qruns    # the quality benchmark's models

Writes ``benchmarks/results/corpus.json``. With ``--from-runs DIR`` (a quality benchmark's ``--keep-runs``, run
directories named ``<configuration>-seed<N>``) it trains nothing: it evaluates each run's result checkpoint window
by window and reports the paired error of every comparison the quality table makes (two configurations on one
seed), in ``benchmarks/results/corpus_trained.json``.
"""

from __future__ import annotations

import argparse
import bz2
import itertools
import lzma
import math
import re
import statistics
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import fmt, markdown_table, write_results

NATS_PER_BIT = math.log(2)


def _nats_per_byte(compressed: int, raw: int) -> float:
    return 8 * compressed / raw * NATS_PER_BIT


def compression_bounds(data: bytes, train: bytes, held: bytes) -> dict[str, float]:
    """Nats per byte each compressor needs (an upper bound on the entropy rate a model could reach)."""

    def xz(b: bytes) -> int:
        return len(lzma.compress(b, preset=9 | lzma.PRESET_EXTREME))

    return {
        "zlib -9": _nats_per_byte(len(zlib.compress(data, 9)), len(data)),
        "bz2 -9": _nats_per_byte(len(bz2.compress(data, 9)), len(data)),
        "xz -9e": _nats_per_byte(xz(data), len(data)),
        "xz -9e, held-out given training": _nats_per_byte(xz(train + held) - xz(train), len(held)),
    }


@dataclass(frozen=True)
class Run:
    """One trained model's eval losses: per held-out window and per held-out block."""

    seed: int
    per_window: np.ndarray
    per_block: np.ndarray
    train_s: float


def cluster_se(per_block: np.ndarray) -> float:
    """Standard error of the mean over blocks (a cluster standard error: windows of a block are not independent).

    >>> round(cluster_se(np.array([1.0, 2.0, 3.0, 4.0])), 4)
    0.6455
    """
    return float(np.std(per_block, ddof=1) / math.sqrt(len(per_block)))


RUN_NAME = re.compile(r"^(?P<config>.+)-seed(?P<seed>\d+)$")


def paired_errors(per_block: dict[tuple[str, int], np.ndarray]) -> dict[str, list[float]]:
    """Per pair of configurations, the cluster SE of their per-block loss difference on each seed both ran.

    >>> e = paired_errors({("a", 0): np.array([1.0, 2.0, 3.0]), ("b", 0): np.array([1.1, 2.0, 3.2])})
    >>> {k: [round(x, 4) for x in v] for k, v in e.items()}
    {'a − b': [0.0577]}
    """
    configs = sorted({c for c, _ in per_block})
    seeds = sorted({s for _, s in per_block})
    return {
        f"{a} − {b}": [
            cluster_se(per_block[(a, s)] - per_block[(b, s)])
            for s in seeds
            if (a, s) in per_block and (b, s) in per_block
        ]
        for a, b in itertools.combinations(configs, 2)
    }


def _evaluator(size: str) -> tuple[Any, Any]:
    """(evaluate(params) -> per-window losses, block index of each window) on the whole held-out split."""
    import jax
    import jax.numpy as jnp

    from trainer import model as model_mod
    from trainer import text_source
    from trainer.config import build_config
    from trainer.training import TrainingSetup

    src = text_source.from_corpus()
    mcfg = TrainingSetup.from_config(build_config({"model": {"size": size}, "data": {"source": "text"}})).model
    windows = src.eval_windows(mcfg.seq_len + 1)
    block_of = np.repeat(
        np.arange(len(src.eval_blocks)), [(b - a) // (mcfg.seq_len + 1) for a, b in src.eval_blocks]
    )

    @jax.jit
    def window_losses(params: dict, rows: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(model_mod.apply(params, mcfg, rows[:, :-1]), axis=-1)
        return -jnp.take_along_axis(logp, rows[:, 1:, None], axis=-1)[..., 0].mean(axis=1)

    def evaluate(params: dict[str, np.ndarray]) -> np.ndarray:
        p = {k: jnp.asarray(v) for k, v in params.items()}
        return np.concatenate(
            [np.asarray(window_losses(p, jnp.asarray(windows[i : i + 64]))) for i in range(0, len(windows), 64)]
        )

    return evaluate, block_of


def from_runs(root: Path) -> int:
    """Evaluate every kept run's result checkpoint; the paired errors of the quality table's comparisons."""
    import yaml

    from trainer.checkpoint import read_checkpoint, result_checkpoint

    runs = sorted(d for d in root.iterdir() if RUN_NAME.match(d.name) and (d / "report.json").exists())
    if not runs:
        raise SystemExit(f"{root}: no finished runs named <configuration>-seed<N> with a report.json")
    sizes = {yaml.safe_load((d / "config.yaml").read_text())["model"]["size"] for d in runs}
    if len(sizes) != 1:
        raise SystemExit(f"{root}: runs of several model sizes {sorted(sizes)}; evaluate one size at a time")
    evaluate, block_of = _evaluator(sizes.pop())
    per_block: dict[tuple[str, int], np.ndarray] = {}
    losses: dict[str, float] = {}
    for d in runs:
        ckpt = result_checkpoint(d / "checkpoints")
        if ckpt is None:
            raise SystemExit(f"{d}: no result checkpoint (was it run with --keep-runs?)")
        arrays, _ = read_checkpoint(ckpt)
        per_window = evaluate({k.removeprefix("param/"): v for k, v in arrays.items() if k.startswith("param/")})
        name = RUN_NAME.match(d.name)
        assert name is not None
        key = (name["config"], int(name["seed"]))
        per_block[key] = np.array([per_window[block_of == b].mean() for b in range(int(block_of.max()) + 1)])
        losses[d.name] = float(per_window.mean())
        print(f"{d.name}: eval loss {losses[d.name]:.4f}, SE {cluster_se(per_block[key]):.4f}", flush=True)
    paired = paired_errors(per_block)
    unpaired = [cluster_se(b) for b in per_block.values()]
    rows = [("SE of one run's eval loss (cluster, over blocks), median", fmt(statistics.median(unpaired), 4))]
    rows += [
        (
            f"SE of the paired difference {pair}, median (max) over seeds",
            f"{fmt(statistics.median(v), 4)} ({fmt(max(v), 4)})",
        )
        for pair, v in paired.items()
        if v
    ]
    table = markdown_table(("quantity", "value"), rows)
    print(table)
    write_results(
        "corpus_trained",
        config={"from_runs": str(root), "runs": [d.name for d in runs]},
        results={"losses": losses, "se_unpaired": unpaired, "se_paired": paired},
        table=table,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    import jax.numpy as jnp

    from trainer import text_source
    from trainer.config import build_config
    from trainer.corpus import CORPUS_SHA256, TEXTS, load_texts
    from trainer.training import TrainingSetup

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="small", choices=["tiny", "small", "wide"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--from-runs", type=Path, default=None, help="evaluate these kept runs' results instead")
    args = ap.parse_args(argv)
    if args.from_runs is not None:
        return from_runs(args.from_runs)

    src = text_source.from_corpus()
    data = src.data.tobytes()
    train = b"".join(data[a:b] for a, b in src.train_runs)
    held = b"".join(data[a:b] for a, b in src.eval_blocks)
    bounds = compression_bounds(data, train, held)
    facts = {
        "sha256": CORPUS_SHA256,
        "bytes": len(data),
        "texts": {t.name: len(b) for t, b in zip(TEXTS, load_texts().values(), strict=True)},
        "distinct_bytes": len(set(data)),
        "train_bytes": src.train_bytes,
        "eval_bytes": src.eval_bytes,
        "eval_blocks": len(src.eval_blocks),
    }
    print(facts, {k: round(v, 4) for k, v in bounds.items()}, flush=True)

    setup0 = TrainingSetup.from_config(build_config({"model": {"size": args.size}, "data": {"source": "text"}}))
    mcfg = setup0.model
    evaluate, block_of = _evaluator(args.size)
    n_windows = len(block_of)  # block_of has one entry per held-out window

    runs: list[Run] = []
    for seed in range(args.runs):
        setup = TrainingSetup.from_config(
            build_config({"seed": seed, "model": {"size": args.size}, "data": {"source": "text"}})
        )
        params = {k: jnp.asarray(v) for k, v in setup.init_params().items()}
        opt = setup.optimizer.init(params)
        batches = setup.batches("learner-0", 0)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            params, opt, loss = setup.train_step(params, opt, jnp.asarray(next(batches)))
        train_s = time.perf_counter() - t0
        per_window = evaluate(params)
        per_block = np.array([per_window[block_of == b].mean() for b in range(len(src.eval_blocks))])
        runs.append(Run(seed, per_window, per_block, train_s))
        print(
            f"seed {seed}: {args.steps} steps in {train_s:.0f}s, eval loss {per_window.mean():.4f}, "
            f"SE {cluster_se(per_block):.4f} (blocks), {per_window.std(ddof=1) / math.sqrt(len(per_window)):.4f} "
            "(windows, as if independent)",
            flush=True,
        )
    unpaired = [cluster_se(r.per_block) for r in runs]
    paired = [
        cluster_se(runs[i].per_block - runs[j].per_block)
        for i in range(len(runs))
        for j in range(i + 1, len(runs))
    ]
    losses = [float(r.per_window.mean()) for r in runs]
    eval_tokens = int(n_windows * mcfg.seq_len)
    results = {
        "facts": facts,
        "bounds_nats_per_byte": bounds,
        "model": {
            "size": args.size,
            "params": sum(v.size for v in setup0.init_params().values()),
            "steps": args.steps,
        },
        "eval": {
            "windows": n_windows,
            "tokens": eval_tokens,
            "losses": losses,
            "se_unpaired": unpaired,
            "se_paired": paired,
            "se_windows_naive": [float(r.per_window.std(ddof=1) / math.sqrt(len(r.per_window))) for r in runs],
        },
    }
    table = markdown_table(
        ("quantity", "value"),
        [
            ("corpus", f"{facts['bytes']:,} bytes, {facts['distinct_bytes']} distinct, 4 English texts"),
            ("training / held-out split", f"{facts['train_bytes']:,} / {facts['eval_bytes']:,} bytes"),
            *[(f"entropy bound: {k}", f"{fmt(v, 4)} nats/byte") for k, v in bounds.items()],
            (
                f"eval set ({args.size} model, T = {mcfg.seq_len})",
                f"{n_windows:,} windows, {eval_tokens:,} predicted bytes",
            ),
            (
                f"eval loss after {args.steps} steps, {args.runs} seeds",
                ", ".join(fmt(x, 4) for x in losses),
            ),
            ("SE of one run's eval loss (cluster, over blocks)", fmt(statistics.median(unpaired), 4)),
            (
                "SE of a difference of two runs on it (paired, cluster)",
                fmt(statistics.median(paired), 4) if paired else "—",
            ),
        ],
    )
    print(table)
    write_results(
        "corpus",
        config={"size": args.size, "steps": args.steps, "runs": args.runs, "seeds": list(range(args.runs))},
        results=results,
        table=table,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
