"""Prometheus metrics of a syncer or a learner, derived from the events it emits.

One home for what a metric counts: every metric here is a function of the event stream (:mod:`trainer.events`),
updated by :meth:`EventMetrics.observe` as each event is written. So a scrape and the run's ``events/*.jsonl``
agree by construction, and deterministic mode, which emits the same events, could serve the same metrics.

Names follow Prometheus's conventions (``_total`` counters, ``_seconds`` and ``_bytes`` units, a ``diloco_``
prefix). A unit's identity (``unit``, ``role``) is a label its target adds (below), or, where a scrape config
cannot know it (a learner replica found by DNS), ``diloco_unit_info{unit, incarnation}`` says it.

A process started with ``--metrics-port`` serves its metrics and announces itself in
``RUN_DIR/metrics/<unit>.json``, a target file in the format of Prometheus's ``file_sd_configs``: a Prometheus
pointed at ``RUN_DIR/metrics/*.json`` scrapes a local run's processes, restarts included (a restarted process
rewrites its file with its new port).

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> from trainer import events as ev
    >>> m = EventMetrics(CollectorRegistry())
    >>> m.observe(ev.Reject(ts=1.0, source="syncer", call="Upload", reason="late_round", detail=""))
    >>> m.registry.get_sample_value("diloco_rejections_total", {"call": "Upload", "reason": "late_round"})
    1.0
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from trainer import events as ev
from trainer.core.merged_tokens import MergedTokens

# Seconds: from a 50 ms emulated step to a minute-long outage.
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_PARTICIPANTS = tuple(float(n) for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64))


class EventMetrics:
    """The metrics of one process, in their own registry (a process serves exactly these)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        num_fragments: int = 1,
        role: Literal["syncer", "learner", "all"] = "all",
    ) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        # A process exports its own role's metrics only: an unlabelled gauge of the other role would be scraped
        # as 0 (a syncer's "learner loss 0" joined a learner dashboard). Unregistered metrics still count.
        rs = r if role != "learner" else None
        rl = r if role != "syncer" else None
        self.merged_book = MergedTokens(num_fragments)  # each trained token once (trainer.core.merged_tokens)
        # syncer
        self.merges = Counter("diloco_merges", "Merges, by fragment", ["fragment"], registry=rs)
        self.participants = Histogram(
            "diloco_merge_participants",
            "Learners whose contribution a merge took",
            buckets=_PARTICIPANTS,
            registry=rs,
        )
        self.round_wait = Histogram(
            "diloco_merge_wait_seconds", "A round's opening to its merge", buckets=_SECONDS, registry=rs
        )
        self.quorum_wait = Histogram(
            "diloco_quorum_wait_seconds", "A round's opening to its quorum", buckets=_SECONDS, registry=rs
        )
        self.grace_wait = Histogram(
            "diloco_grace_wait_seconds",
            "Quorum reached to merge: the grace window used",
            buckets=_SECONDS,
            registry=rs,
        )
        self.version = Gauge("diloco_fragment_version", "Each fragment's version", ["fragment"], registry=rs)
        self.tokens_counted = Gauge(
            "diloco_trained_tokens_counted",
            "Trained tokens the syncer counted toward the budget, as learners reported them",
            registry=rs,
        )
        # Counters, for rate(): compute goodput = rate(merged) / rate(trained) (observability/rules.yml).
        self.merged_tokens = Counter(
            "diloco_merged_tokens",
            "Trained tokens whose contributions merges took (each contribution's c_tokens / fragments)",
            registry=rs,
        )
        self.last_merge = Gauge(
            "diloco_last_merge_timestamp_seconds", "When the last merge happened (Unix time)", registry=rs
        )
        self.info = Gauge(
            "diloco_unit_info",
            "Which unit this process is (value 1): join on instance",
            ["unit", "incarnation"],
            registry=r,
        )
        self.rejections = Counter(
            "diloco_rejections", "Calls refused, by call and reason", ["call", "reason"], registry=rs
        )
        self.uploads = Counter("diloco_uploads", "Contributions received", registry=rs)
        self.upload_bytes = Counter("diloco_upload_bytes", "Bytes of contributions received", registry=rs)
        self.upload_seconds = Histogram(
            "diloco_upload_seconds", "Time to receive a contribution", buckets=_SECONDS, registry=rs
        )
        self.eval_loss = Gauge("diloco_eval_loss", "The merged model's last eval loss", registry=rs)
        self.syncer_starts = Counter(
            "diloco_syncer_starts", "Syncer incarnations started (restarts + 1)", registry=rs
        )
        self.joins = Counter("diloco_joins", "Learner joins accepted (rejoins included)", registry=rs)
        # learner
        self.steps = Gauge("diloco_learner_steps", "Inner steps this incarnation has taken", registry=rl)
        self.tokens = Gauge("diloco_learner_tokens", "Tokens this incarnation has trained", registry=rl)
        self.trained_tokens = Counter(
            "diloco_learner_trained_tokens", "Tokens trained (rate() spans restarts)", registry=rl
        )
        self._trained = 0  # the cumulative count the last Step reported
        self.loss = Gauge("diloco_learner_loss", "The last inner step's training loss", registry=rl)
        self.step_seconds = Gauge("diloco_learner_step_seconds", "The last inner step's wall time", registry=rl)
        self.sync_results = Counter(
            "diloco_learner_syncs", "Uploads answered, by outcome", ["accepted", "reason"], registry=rl
        )
        self.incarnation = Gauge(
            "diloco_learner_incarnation", "This learner's incarnation index (restarts)", registry=rl
        )

    def observe(self, e: ev.Event) -> None:
        """Update the metrics one event moves (the others move none)."""
        if isinstance(e, ev.Merge):
            self.merges.labels(fragment=str(e.fragment)).inc()
            self.participants.observe(len(e.participants))
            self.round_wait.observe(e.wait_s)
            self.quorum_wait.observe(max(e.wait_s - e.quorum_wait_s, 0.0))
            self.grace_wait.observe(e.quorum_wait_s)
            self.version.labels(fragment=str(e.fragment)).set(e.version)
            self.tokens_counted.set(e.tokens_total)
            self.merged_tokens.inc(
                sum(
                    self.merged_book.add(p.learner_id, p.incarnation, e.fragment, p.base_version, p.c_tokens)
                    for p in e.participants
                )
            )
            self.last_merge.set(e.ts)
        elif isinstance(e, ev.Reject):
            self.rejections.labels(call=e.call, reason=e.reason).inc(1 + e.repeats)
        elif isinstance(e, ev.Upload):
            self.uploads.inc()
            self.upload_bytes.inc(e.bytes)
            self.upload_seconds.observe(e.seconds)
        elif isinstance(e, ev.Eval):
            self.eval_loss.set(e.loss)
        elif isinstance(e, ev.SyncerStart):
            self.syncer_starts.inc()
            self.info.labels(unit="syncer", incarnation=e.syncer_incarnation).set(1)
        elif isinstance(e, ev.LearnerStart):
            self.info.labels(unit=e.learner_id, incarnation=e.learner_incarnation).set(1)
        elif isinstance(e, ev.Join):
            self.joins.inc()
        elif isinstance(e, ev.Step):
            self.steps.set(e.step)
            self.tokens.set(e.tokens)
            self.trained_tokens.inc(max(e.tokens - self._trained, 0))
            self._trained = e.tokens
            self.loss.set(e.loss)
            self.step_seconds.set(e.step_time_s)
        elif isinstance(e, ev.SyncResult):
            self.sync_results.labels(accepted=str(e.accepted).lower(), reason=e.reason).inc()
        elif isinstance(e, ev.LearnerJoin):
            self.incarnation.set(e.incarnation_index)


@dataclass
class MetricsServer:
    """``/metrics`` over HTTP for one registry, on a daemon thread (Prometheus's own exposition server)."""

    host: str
    port: int  # the bound port (0 asked for a free one)
    _server: Any

    @classmethod
    def start(cls, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
        server, _thread = start_http_server(port, addr=host, registry=registry)
        return cls(host, server.server_port, server)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def add_metrics_arguments(ap: argparse.ArgumentParser) -> None:
    """``--metrics-port`` / ``--metrics-host``, the same on the syncer and the learners."""
    ap.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics on this port (0: a free one; RUN_DIR/metrics/UNIT.json names it)",
    )
    ap.add_argument(
        "--metrics-host", default="127.0.0.1", help="address /metrics listens on (0.0.0.0 in containers)"
    )


def target_file(run_dir: Path, unit: str) -> Path:
    return Path(run_dir) / "metrics" / f"{unit}.json"


def expose(
    args: argparse.Namespace, run_dir: Path, unit: str, role: Literal["syncer", "learner"], num_fragments: int = 1
) -> EventMetrics | None:
    """Serve this process's metrics if ``--metrics-port`` asked for it and announce the target; else None."""
    if args.metrics_port is None:
        return None
    metrics = EventMetrics(num_fragments=num_fragments, role=role)
    try:
        server = MetricsServer.start(metrics.registry, args.metrics_host, args.metrics_port)
    except OSError as err:  # a process exits before it does anything, saying why (SystemExit: to stderr, code 1)
        raise SystemExit(
            f"error: cannot serve /metrics on {args.metrics_host}:{args.metrics_port}: {err}; pass "
            "another --metrics-port (0: a free one)"
        ) from None
    announce(run_dir, unit, role, server)
    return metrics


def announce(run_dir: Path, unit: str, role: str, server: MetricsServer) -> Path:
    """Write ``RUN_DIR/metrics/<unit>.json``: where ``server`` is, as a Prometheus file_sd target."""
    # A wildcard listener is reached by the host's name (a container's name on a compose network).
    host = socket.gethostname() if server.host in ("0.0.0.0", "::", "") else server.host
    path = target_file(run_dir, unit)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps(
            [
                {
                    "targets": [f"{host}:{server.port}"],
                    "labels": {"unit": unit, "role": role, "run": Path(run_dir).name},
                }
            ]
        )
    )
    os.replace(tmp, path)  # Prometheus re-reads the file on change: never let it see half of one
    return path
