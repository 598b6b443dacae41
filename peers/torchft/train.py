"""One torchft replica group training a byte-level language model with torchft's DiLoCo, writing our events.

The system under test is torchft's: its ``Manager`` (quorum through a Lighthouse, healing a group that is behind
from a peer's checkpoint, commit or not), ``local_sgd.DiLoCo`` (every ``sync_every`` inner steps one fragment's
pseudo-gradient all-reduced over the quorum and an outer Nesterov step) and ``ProcessGroupGloo``. Ours are only the
model, the data and what is logged: a byte-level MLP language model on the pinned corpus with our train/eval split
(trainer.text_source), so its losses sit beside our trainer's; and events in docs/events.md's schema, written from
torchft's own structured loggers (``torchft_quorums``, ``torchft_commits``) and the Manager's state:

- ``learner_start`` (this process), ``learner_join`` (its first quorum), ``state_fetch`` (torchft healed it: the
  Manager loaded a peer's state; versions are the Manager's step), ``step`` summaries with the data position;
- per fragment sync: ``sync_start`` when the fragment's all-reduce starts, ``sync_result`` with torchft's commit
  decision, and after a commit ``apply`` with the digest (trainer.core.audit.digest) of the fragment's global value
  — every group of a committed step must hold the same (the torchft check);
- at the end an ``eval`` (``final``) of the group's global parameters, and ``learner_stop``.

Run: ``python -m peers.torchft.train --replica-id group-0 --lighthouse http://127.0.0.1:29510 --events F``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
import uuid
from datetime import timedelta
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributed import TCPStore
from torchft import Manager, ProcessGroupGloo
from torchft.local_sgd import DiLoCo

from trainer import events as ev
from trainer.core.audit import digest
from trainer.text_source import TextSource, from_corpus

CONTEXT = 8  # bytes of context the model sees
WINDOW = 65  # bytes per training row (as our presets')


class ByteMLP(nn.Module):
    """Next byte from the previous CONTEXT bytes: embed, concatenate, hidden layers. Its fragments: the embedding,
    each hidden layer, the output layer (``fragments`` of them: 2 + hidden layers)."""

    def __init__(self, fragments: int = 4, dim: int = 32, hidden: int = 384) -> None:
        super().__init__()
        if fragments < 3:
            raise SystemExit(
                f"--fragments {fragments}: the model has at least 3 (embedding, a hidden layer, output)"
            )
        self.embed = nn.Embedding(256, dim)
        widths = [CONTEXT * dim] + [hidden] * (fragments - 2)
        self.hidden = nn.ModuleList(
            nn.Sequential(nn.Linear(widths[i], hidden), nn.GELU()) for i in range(fragments - 2)
        )
        self.out = nn.Linear(hidden, 256)

    def fragments(self) -> list[nn.Module]:
        return [self.embed, *self.hidden, self.out]

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """Mean next-byte cross-entropy (nats) over every position of ``rows`` with a full context."""
        ctx = rows.unfold(1, CONTEXT + 1, 1)  # (batch, positions, CONTEXT + 1)
        x, y = ctx[..., :CONTEXT], ctx[..., CONTEXT]
        h = self.embed(x).flatten(-2)
        for layer in self.hidden:
            h = layer(h)
        return nn.functional.cross_entropy(self.out(h).flatten(0, 1), y.flatten())


def fragment_digest(module: nn.Module) -> str:
    return digest({n: p.detach().numpy().astype(np.float32) for n, p in module.named_parameters()})


def evaluate(model: ByteMLP, source: TextSource, batches: int = 8) -> float:
    rows = torch.from_numpy(source.eval_rows(n_batches=batches, batch=32, length=WINDOW).astype(np.int64))
    with torch.no_grad():
        return float(np.mean([model(b).item() for b in rows]))


class Logged(logging.Handler):
    """torchft's structured loggers (their ``extra`` fields), kept for the step loop to turn into events."""

    def __init__(self) -> None:
        super().__init__()
        self.quorums: list[dict[str, Any]] = []
        self.commits: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = {
            k: getattr(record, k)
            for k in ("replica_id", "quorum_id", "step", "commit_result")
            if hasattr(record, k)
        }
        (self.commits if record.name == "torchft_commits" else self.quorums).append(fields)


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--replica-id", required=True)
    a.add_argument("--index", type=int, required=True, help="the group's data key")
    a.add_argument("--lighthouse", required=True)
    a.add_argument("--host", default="127.0.0.1", help="the address the other groups reach this one at")
    a.add_argument("--events", required=True)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument(
        "--incarnation", type=int, default=0, help="how many times this group started before (its data)"
    )
    a.add_argument("--outer-steps", type=int, default=60, help="fragment syncs (the Manager's step) to train for")
    a.add_argument("--fragments", type=int, default=4)
    a.add_argument("--sync-every", type=int, default=8, help="inner steps between a fragment's syncs (H)")
    a.add_argument("--batch", type=int, default=8)
    a.add_argument("--inner-lr", type=float, default=2e-3)
    a.add_argument("--min-replicas", type=int, default=1)
    a.add_argument("--timeout-s", type=float, default=10.0)
    a.add_argument("--quorum-timeout-s", type=float, default=60.0)
    a.add_argument("--quorum-retries", type=int, default=0, help="torchft's default: 0")
    a.add_argument("--step-delay-s", type=float, default=0.0, help="sleep per inner step (a slower machine)")
    args = a.parse_args(argv)

    incarnation = f"{args.replica_id}.{uuid.uuid4().hex[:8]}"
    log = ev.EventLog(args.events, args.replica_id)
    log.emit(
        ev.LearnerStart(
            learner_id=args.replica_id,
            learner_incarnation=incarnation,
            pid=os.getpid(),
            syncer=args.lighthouse,
            config_hash="",
        )
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    torch.manual_seed(args.seed)  # the same initial model in every group
    torch.set_num_threads(1)
    model = ByteMLP(args.fragments)
    fragments = model.fragments()
    source = from_corpus()
    stream = [
        args.seed,
        args.index,
        args.incarnation,
    ]  # each incarnation its own data stream (the data ledger's key)
    rng = np.random.default_rng(stream)
    inner = torch.optim.AdamW(model.parameters(), lr=args.inner_lr, weight_decay=0.1, betas=(0.9, 0.95))
    outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) for f in fragments]
    healed: list[int] = []

    def load_state_dict(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["inner"])
        healed.append(1)

    logged = Logged()
    for name in ("torchft_quorums", "torchft_commits"):
        logging.getLogger(name).addHandler(logged)
        logging.getLogger(name).setLevel(logging.INFO)
    # This group's own store (world size 1); the other groups reach it, and its Manager, at --host.
    store = TCPStore(args.host, 0, is_master=True, wait_for_workers=False)
    timeout = timedelta(seconds=args.timeout_s)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout),
        min_replica_size=args.min_replicas,
        use_async_quorum=False,
        load_state_dict=load_state_dict,
        state_dict=lambda: {"model": model.state_dict(), "inner": inner.state_dict()},
        replica_id=args.replica_id,
        store_addr=args.host,
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=args.lighthouse,
        hostname=args.host,
        timeout=timeout,
        quorum_timeout=timedelta(seconds=args.quorum_timeout_s),
        quorum_retries=args.quorum_retries,
        connect_timeout=timeout,
    )
    nfrag = len(fragments)
    tokens = step = 0
    joined = False
    seen_commits = 0
    with DiLoCo(
        manager,
        fragments,
        inner,
        outer,
        sync_every=args.sync_every,
        backup_device=torch.device("cpu"),
        pin_memory=False,
    ):
        while manager.current_step() < args.outer_steps and not stopping:
            before = manager.current_step()
            rows = torch.from_numpy(source.sample(rng, args.batch, WINDOW).astype(np.int64))
            loss = model(rows)
            inner.zero_grad()
            loss.backward()
            inner.step()  # DiLoCo's hooks: every sync_every steps a fragment syncs (quorum, all-reduce, commit)
            step += 1
            tokens += rows.numel()
            if args.step_delay_s:
                time.sleep(args.step_delay_s)
            if logged.quorums and not joined:
                joined = True
                q = logged.quorums[0]
                log.emit(
                    ev.LearnerJoin(
                        learner_incarnation=incarnation,
                        incarnation_index=int(q["quorum_id"]),
                        versions=[int(q["step"])] * nfrag,
                        syncer_incarnation=str(q["quorum_id"]),
                    )
                )
            if healed:
                healed.clear()
                s = manager.current_step()
                log.emit(
                    ev.StateFetch(
                        versions=[s] * nfrag, seconds=0.0, digests=[fragment_digest(f) for f in fragments]
                    )
                )
            for c in logged.commits[seen_commits:]:
                s = int(c["step"])  # the Manager's step the sync was for: fragment s mod F
                p = s % nfrag
                log.emit(
                    ev.SyncStartEvent(
                        fragment=p,
                        base_version=s,
                        c_steps=args.sync_every,
                        c_tokens=args.sync_every * rows.numel(),
                        step=step,
                        round=s,
                    )
                )
                log.emit(
                    ev.SyncResult(
                        fragment=p,
                        base_version=s,
                        round=s,
                        accepted=bool(c["commit_result"]),
                        reason="" if c["commit_result"] else "not committed",
                        seconds=0.0,
                        bytes=0,
                    )
                )
                if c["commit_result"] and manager.current_step() > before:
                    log.emit(ev.Apply(fragment=p, version=s + 1, step=step, digest=fragment_digest(fragments[p])))
            seen_commits = len(logged.commits)
            if step % 10 == 0:
                data = ev.DataPosition(stream=stream, batches=step)
                log.emit(
                    ev.Step(
                        step=step,
                        loss=float(loss.item()),
                        tokens=tokens,
                        step_time_s=0.0,
                        blocked_s=0.0,
                        data=data,
                    )
                )
    final = evaluate(model, source)
    log.emit(
        ev.Eval(
            merges_total=manager.current_step(),
            versions=[manager.current_step()] * nfrag,
            loss=final,
            loss_floor=float("nan"),
            tokens_total=tokens,
            final=True,
        )
    )
    log.emit(ev.LearnerStop(why="signal" if stopping else "finished", step=step, tokens=tokens))
    log.close()
    manager.shutdown(wait=False)
    return (
        128 + signal.SIGTERM if stopping else 0
    )  # 0: it trained its budget (the runner reads the result as fixed)


if __name__ == "__main__":
    sys.exit(main())
