"""Deterministic mode: a whole chaos run in one process, on a virtual clock.

:func:`simulate` takes the same :class:`~chaos.scenario.Scenario` the real
controller runs, plans it with the same :func:`~chaos.fault_plan.plan`, drives
the real syncer and learner cores (:mod:`chaos.sim.syncer_node`, :mod:`chaos.sim.learner_node`) with a
discrete-event loop, applies faults as events, and judges the recorded history
with the same checkers. Given a scenario (its seeds included) and
:class:`SimOptions`, a run is reproducible bit for bit: no sockets, threads or
wall clock.

What is modelled, per fault kind: ``kill``/``stop``/``corrupt`` end the
learner incarnation (a restart joins again after ``restart_delay_s``, the
process start-up and JIT a real restart costs); ``pause`` freezes it (replies
wait until it resumes); ``slow`` and ``cpu_limit`` stretch its step time;
``partition``/``link_down``/``reset_peer``/``data_limit``/``disconnect`` drop
messages in the cut direction (the sender learns at its RPC deadline);
``latency`` and ``bandwidth`` delay them; ``syncer_crash`` (or ``kill`` of the
syncer) loses everything since the last checkpoint and restores from it.

The progress watchdog (:mod:`chaos.watchdog`) polls the syncer on the virtual
clock as the controller does on the wall clock: a run that stops training is
ended, its faults healed and its learners stopped, and judged (liveness FAIL,
exit 1), not left to run into ``timeout_s``.

Example:
    >>> from chaos.scenario import parse_scenario
    >>> s = parse_scenario({"name": "demo", "cluster": {"token_budget": 1_000_000},
    ...     "schedule": [{"fault": "kill", "targets": ["learner-1"], "at": 1, "duration": 2}],
    ...     "checks": {"reintegration": {"within_s": 10}}})
    >>> r = simulate(s)
    >>> r.status, [v.name for v in r.verdicts if v.status != "pass"]
    ('pass', [])
    >>> simulate(s).history_json() == r.history_json()      # bit-for-bit replay
    True

Why one module: it is the simulation's host, the one object its nodes call back into (:mod:`chaos.sim.host`):
the network model, the controller's part and the run's lifecycle.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chaos.checkers import CheckInput, RunFacts, Verdict, overall, run_checks
from chaos.checkers.goodput import compute_goodput
from chaos.checkers.learner_replay import Stepper
from chaos.fault_plan import Planned, plan
from chaos.history import (
    History,
    NotRun,
    NotRunPhase,
    Phase,
    PlanRecord,
    Stalled,
    StalledPhase,
    Teardown,
    TeardownPhase,
)
from chaos.interpreter import Inject, PlanInterpreter, Step, carry_out
from chaos.run_report import Band
from chaos.scenario import Scenario
from chaos.sim.clock import EventLoop
from chaos.sim.effects import play
from chaos.sim.learner_node import LearnerNode, data_rng, inner_step
from chaos.sim.network import Link
from chaos.sim.options import SimOptions
from chaos.sim.problem import MAX_CURVATURE, QuadraticProblem
from chaos.sim.syncer_node import SyncerNode
from chaos.watchdog import POLL_S, Progress, stalled
from trainer import events as ev
from trainer import model as model_mod
from trainer.audit_log import AuditWriter
from trainer.core.fragments import partition_tensors
from trainer.policy import policy_from_config
from trainer.wire import CHUNK_BYTES

if TYPE_CHECKING:
    from chaos.analysis import RunResult

T0 = 1_700_000_000.0  # virtual epoch: event stamps look like Unix times, as real ones do


@dataclass
class SimResult:
    """A simulated run: its history, the checkers' verdicts, and how long it ran in virtual seconds."""

    scenario: Scenario
    history: History
    verdicts: list[Verdict]
    status: str
    exit_code: int
    baseline_final_loss: float | None
    final_loss: float | None
    virtual_s: float
    timed_out: bool
    events_handled: int
    audit: AuditWriter | None = None  # the merges kept whole, in memory (written to audit/ by write)
    baseline_band: Band | None = None  # the fault-free seeds parity judged against
    stalled: bool = False  # the progress watchdog ended it (chaos.watchdog): training had stopped

    def failed(self, *names: str) -> list[Verdict]:
        """Verdicts that failed (only those named, when names are given)."""
        return [v for v in self.verdicts if v.status == "fail" and (not names or v.name in names)]

    def history_json(self) -> str:
        return "\n".join(self.history.json_lines())

    def write(self, out_dir: str | Path) -> RunResult:
        """Write the run directory a real run would leave, and its reports; returns the controller's RunResult."""
        from chaos.analysis import analyse
        from chaos.run_report import Baseline

        out = Path(out_dir)
        (out / "events").mkdir(parents=True, exist_ok=True)
        (out / "scenario.json").write_text(self.scenario.model_dump_json(indent=2))
        with open(out / "controller.jsonl", "w", encoding="utf-8") as f:
            for r in self.history.records:
                f.write(r.model_dump_json() + "\n")
        by_source: dict[str, list[str]] = {}
        for e in self.history.events:
            by_source.setdefault(e.source, []).append(e.model_dump_json())
        for source, lines in by_source.items():
            (out / "events" / f"{source}.jsonl").write_text("\n".join(lines) + "\n")
        if self.audit is not None:
            self.audit.write_files(out)
        baseline = None
        if self.baseline_final_loss is not None:
            baseline = Baseline(final_eval_loss=self.baseline_final_loss, simulated=True, band=self.baseline_band)
            baseline.write(out / "baseline.json")
        return analyse(self.scenario, out, baseline)


@functools.lru_cache(maxsize=8)
def model_shapes(size: str, vocab_size: int | None = None) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of a model size (and the data's vocabulary), without computing any parameter."""
    return model_mod.param_shapes(model_mod.sized(size, vocab_size))


class _Call:
    """One RPC in flight: it ends exactly once, by a reply, a fast failure (closed connection) or its deadline."""

    def __init__(
        self,
        sim: Simulation,
        node: LearnerNode,
        on_reply: Callable[[Any], None],
        on_fail: Callable[[], None],
        deadline_s: float,
    ) -> None:
        self.sim, self.node, self.inc = sim, node, node.incarnation
        self.on_reply, self.on_fail = on_reply, on_fail
        self.deadline = sim.loop.now + deadline_s
        self.done = False
        self.on_lost: Callable[[], None] | None = None  # the syncer read the header: tell it if the call fails
        self.timer = sim.loop.at(self.deadline, self._end, on_fail, ())
        sim.inflight[node.lid][self] = None

    def _end(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if self.done:
            return
        self.done = True
        self.timer.cancel()
        self.sim.inflight[self.node.lid].pop(self, None)
        if fn is self.on_fail and self.on_lost is not None:
            self.on_lost()  # as a cancelled stream ends the service's read: it stops waiting for the body
        self.node.deliver(self.inc, fn, *args)

    def fail_fast(self) -> None:
        if not self.done:
            self.sim.loop.after(self.sim.opts.latency_s, self._end, self.on_fail, ())

    def arrive(self, handler: Callable[[Callable[[Any, int], None], Callable[[], None]], None]) -> None:
        """The request reached the syncer: a down syncer refuses it, a paused one never answers."""
        if self.done:
            return
        if not self.sim.syncer.up:
            self.fail_fast()
        elif self.sim.syncer.serving:
            handler(self.respond, self.fail_fast)

    def piece(self, handler: Callable[[], None]) -> None:
        """Another piece of the request's body reached the syncer (trainer.wire.CHUNK_BYTES each)."""
        if not self.done and self.sim.syncer.serving:
            handler()

    def header(self, handler: Callable[[], None], on_lost: Callable[[], None] | None) -> None:
        """The request's first bytes reached the syncer (only a serving one reads them); ``on_lost`` runs there if
        the call then fails before its reply."""
        if not self.done and self.sim.syncer.serving:
            handler()
            self.on_lost = on_lost

    def respond(self, reply: Any, nbytes: int) -> None:
        if self.done:
            return
        link = self.sim.links[self.node.lid]
        cut = link.blocked("from_syncer")
        if cut == "refuse":
            self.fail_fast()
            return
        if cut == "drop":
            return  # lost: the deadline (or the heal's reset) ends the call
        _, t = link.send(
            "from_syncer",
            nbytes,
            self.sim.loop.now,
            self.sim.opts.latency_s,
            self.sim.opts.bandwidth_Bps,
            self.sim.rng,
        )
        if self.sim.loop.now + t <= self.deadline:
            self.sim.loop.after(t, self._end, self.on_reply, (reply,))


class Simulation:
    """One simulated run; build it, then :meth:`run`."""

    def __init__(self, scenario: Scenario, opts: SimOptions, planned: list[Planned]) -> None:
        self.scenario = scenario
        self.cfg = scenario.cluster
        self.opts = opts
        self.planned = planned
        self.config_hash = self.cfg.config_hash()
        self.loop = EventLoop()
        self.rng = np.random.default_rng([scenario.seed, self.cfg.seed, 0x5EED])
        learners = scenario.learner_ids()
        shapes = model_shapes(self.cfg.model.size, self.cfg.data.model_vocab)
        self.problem = QuadraticProblem.create(
            shapes, self.cfg.seed, dims=opts.surrogate_dims, learners=max(len(learners), 1)
        )
        self.fragments = partition_tensors(self.problem.real_sizes(), self.cfg.algorithm.num_fragments)
        self.fragment_names = [list(f.names) for f in self.fragments]
        # The syncer bounds one inner step's update (trainer.core.claims) by lr·(K·√n + wd·‖Θ‖), written for
        # AdamW. The surrogate learners take SGD steps on a quadratic instead, lr·(a⊙(θ − c) + noise) with
        # curvature a ≤ 1: the same form with the simulator's lr and twice the curvature in the decay's place
        # (K = 10 covers ‖c‖ + noise ≈ 3.8·√n; the 2 covers a learner's θ drifting from the current Θ). Without
        # that bound a learner sending garbage from the first round had nothing to compare against (the merged-norm
        # median needs a history) and blew the model up (nightly, 2026-12-02). Per coordinate the surrogate's own
        # bound replaces AdamW's (QuadraticProblem.coordinate_step_bound). Data-parallel uploads gradients: no
        # step bound there, as in the trainer.
        policy = policy_from_config(self.cfg)
        self.policy = replace(
            policy,
            inner_lr=opts.inner_lr if policy.inner_lr > 0 else 0.0,
            inner_weight_decay=2 * MAX_CURVATURE,
            coordinate_step_bound=self.problem.coordinate_step_bound(),
        )
        self.tokens_per_step = self.policy.tokens_per_step
        self.records: list[Any] = []
        self.events: list[ev.Event] = []
        self.audit = AuditWriter(None, keep_fraction=1.0, seed=self.cfg.seed)  # small tensors: keep every merge
        self.syncer = SyncerNode(self)
        self.learners = {lid: LearnerNode(self, lid, i) for i, lid in enumerate(learners)}
        self.links = {lid: Link() for lid in learners}
        # Calls in flight per link, in the order they started (a dict, not a set: iteration order must not
        # depend on object addresses, or a reset would fail them in a different order from run to run).
        self.inflight: dict[str, dict[_Call, None]] = {lid: {} for lid in learners}
        self.steady_at: float | None = None
        self.merges_total = 0
        self.result_fixed = False  # the syncer fixed the result (its result_fixed): no new fault starts
        self.interp = PlanInterpreter(planned, origin=0.0)  # re-made with the steady time as its origin
        self._wakes: set[float] = set()  # times a _tick is scheduled for
        self.progress = Progress()  # the syncer's counters at the watchdog's last poll
        self.stalled: Stalled | None = None  # why the watchdog ended the run
        self.done = False

    def inner_steps(self, learner_id: str, incarnation_index: int) -> Stepper:
        """A learner's inner step and data stream, as its state fetch starts them (the learner replay's:
        chaos.checkers.learner_replay), on the tensors in the order the learner holds them (its noise is drawn
        in that order)."""
        index = self.learners[learner_id].index
        rng = data_rng(self, index, incarnation_index)
        order = [n for names in self.fragment_names for n in names]
        return lambda params, progress: inner_step(self, {n: params[n] for n in order}, index, rng, progress)

    # ---- recording ----------------------------------------------------------------------
    @property
    def ts(self) -> float:
        return T0 + self.loop.now

    def emit(self, source: str, kind: type, **fields: Any) -> None:
        self.events.append(kind(ts=self.ts, source=source, **fields))

    def record(self, kind: type, **fields: Any) -> None:
        self.records.append(kind(ts=self.ts, **fields))

    # ---- the network ----------------------------------------------------------------------
    def upload_seconds(self, lid: str, nbytes: int) -> float:
        return self.links[lid].delay("to_syncer", nbytes, self.opts.latency_s, self.opts.bandwidth_Bps)

    def rpc(
        self,
        node: LearnerNode,
        req_bytes: int,
        handler: Callable[[Callable[[Any, int], None], Callable[[], None]], None],
        on_reply: Callable[[Any], None],
        on_fail: Callable[[], None],
        on_header: Callable[[], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        on_piece: Callable[[], None] | None = None,
        deadline_s: float | None = None,
    ) -> None:
        """A unary call from a learner to the syncer, with the learner's RPC deadline (see :class:`_Call`;
        ``deadline_s`` for a call that carries a body: trainer.core.deadlines, as the real client's), sent behind
        what its link still carries that way; ``on_header`` runs when the request's first bytes reach the syncer (a
        streamed upload's header), ``on_piece`` as each further piece of its body does, ``on_lost`` there when the
        call fails after its header."""
        deadline = self.cfg.learner.rpc_timeout_s if deadline_s is None else deadline_s
        call = _Call(self, node, on_reply, on_fail, deadline)
        link = self.links[node.lid]
        cut = link.blocked("to_syncer")
        if cut == "refuse":
            call.fail_fast()
        elif cut is None:
            first, t = link.send(
                "to_syncer", req_bytes, self.loop.now, self.opts.latency_s, self.opts.bandwidth_Bps, self.rng
            )
            if on_header is not None:
                self.loop.after(first, call.header, on_header, on_lost)
            if on_piece is not None:
                pieces = math.ceil(req_bytes / CHUNK_BYTES)
                for k in range(1, pieces):
                    self.loop.after(first + (t - first) * k / pieces, call.piece, on_piece)
            self.loop.after(t, call.arrive, handler)

    def reset_link(self, lid: str) -> None:
        """The link's connections are closed: every call in flight on it fails now."""
        self.links[lid].drain(self.loop.now)
        for call in list(self.inflight[lid]):
            call.fail_fast()

    # ---- the controller's part ----------------------------------------------------------------
    def on_merge(self, merges_total: int) -> None:
        self.merges_total = merges_total
        if self.steady_at is None:
            self.steady_at = self.loop.now
            self.interp = PlanInterpreter(self.planned, origin=self.steady_at)
            self.record(Phase, name="steady", detail={"merges": merges_total})
        self.loop.after(0.0, self._tick)  # an at_merge fault starts just after the merge, as the controller polls

    def on_syncer_exit(self) -> None:
        self.loop.after(0.0, self._finish)

    def _tick(self) -> None:
        """Take the fault plan's steps that are due now (chaos.interpreter), and wake when the next one is."""
        if self.done:
            return
        # As the controller: no new fault starts once the syncer has fixed the result (StatusReply.finished),
        # latched across a later restart of the syncer.
        self.result_fixed = self.result_fixed or self.syncer.result_fixed
        for step in self.interp.due(self.loop.now, self.merges_total, self.result_fixed):
            self._take(step)
        t = self.interp.next_time()
        if t is not None and t not in self._wakes:
            self._wakes.add(t)
            self.loop.at(t, self._tick)

    def _take(self, step: Step) -> None:
        """Play one step of the fault plan (chaos.sim.effects) and record it as the controller does."""
        inject = isinstance(step, Inject)
        carry_out(step, lambda: play(self, step.planned, inject), self.records.append, clock=lambda: self.ts)

    def restart_learner(self, lid: str, corrupt: str = "") -> None:
        node = self.learners[lid]
        node.kill()

        def restart() -> None:
            if not self.done:
                node.start(corrupt)

        self.loop.after(self.opts.restart_delay_s, restart)

    def restart_syncer(self) -> None:
        def restart() -> None:
            if not self.done and not self.syncer.up:
                self.syncer.start()

        self.loop.after(self.opts.syncer_restart_delay_s, restart)

    def _watch(self) -> None:
        """Poll the syncer's progress as the controller does; end and judge a run that stopped (chaos.watchdog)."""
        if self.done:
            return
        st = self.syncer.state
        if (
            st is not None and self.syncer.up and not self.syncer.paused
        ):  # a down or stopped syncer answers no poll
            self.progress = self.progress.observe(st.merges_total, st.tokens_total, self.ts)
        stall = stalled(History(self.records, self.events), self.progress, self.ts, self.scenario.checks.liveness)
        if stall is None:
            self.loop.after(POLL_S, self._watch)
            return
        self.stalled = stall
        self.record(StalledPhase, detail=stall)
        self._wind_up()

    def _finish(self) -> None:
        if self.done:
            return
        self.record(
            Phase, name="finished", detail={"merges": max((m.merges_total for m in self._merges()), default=0)}
        )
        self._wind_up()

    def _wind_up(self) -> None:
        """The run ended: record the faults never started, heal the active ones, tear down."""
        if self.interp.not_run():
            self.record(NotRunPhase, detail=NotRun(faults=self.interp.not_run()))
        for heal in self.interp.finish():
            self._take(heal)
        self._teardown()

    def _merges(self) -> list[ev.Merge]:
        return [e for e in self.events if isinstance(e, ev.Merge)]

    def _teardown(self) -> None:
        for node in self.learners.values():
            if node.alive:
                node.paused = False
                node.emit(ev.LearnerStop, why="signal", step=node.step, tokens=node.tokens)
                node.kill()
        self.record(
            TeardownPhase,
            detail=Teardown(proxies_left=[], processes_left=[], healed_on_teardown=False, simulated=True),
        )
        self.done = True
        self.loop.stop()

    # ---- the run ------------------------------------------------------------------------------
    def run(self) -> bool:
        """Run to the end, to the progress watchdog's stop, or to the scenario's timeout (in virtual seconds, the
        last-resort cap); returns whether it timed out."""
        self.record(
            PlanRecord,
            scenario=self.scenario.name,
            seed=self.scenario.seed,
            faults=[p.record() for p in self.planned],
        )
        self.record(Phase, name="bring_up", detail={"backend": "sim", "simulated": True})
        # A cold start costs what a restart costs (process start, imports, JIT), so the start-up the checks'
        # bounds are measured from matches the restarts they judge, as it does for real processes.
        self.loop.after(self.opts.syncer_restart_delay_s, self.syncer.start)
        for node in self.learners.values():
            self.loop.after(self.opts.restart_delay_s, node.start)
        self.loop.after(POLL_S, self._watch)
        self.loop.run(until=self.scenario.timeout_s)
        if not self.done:
            for heal in self.interp.finish(why="teardown"):
                self._take(heal)
            self._teardown()
            return True
        return False


_BASELINES: dict[tuple[str, str, int], tuple[float | None, float | None, float | None]] = {}


def _final_loss(events: list[ev.Event]) -> float | None:
    finals = [e.loss for e in events if isinstance(e, ev.Eval) and e.final]
    return finals[-1] if finals else None


def _final_excess(events: list[ev.Event]) -> float | None:
    finals = [e for e in events if isinstance(e, ev.Eval) and e.final]
    return finals[-1].loss - finals[-1].loss_floor if finals else None


def baseline_loss(scenario: Scenario, opts: SimOptions) -> float | None:
    """Final eval loss of the same cluster without faults (memoised per config and options)."""
    return _fault_free(scenario, opts, scenario.cluster.seed)[0]


def _fault_free(
    scenario: Scenario, opts: SimOptions, seed: int
) -> tuple[float | None, float | None, float | None]:
    """(final loss, its excess over the floor, compute goodput) of the cluster at ``seed`` without faults
    (memoised)."""
    cluster = scenario.cluster.fault_free_at(seed)
    key = (cluster.config_hash(), opts.key(), scenario.seed)
    if key not in _BASELINES:
        clean = scenario.model_copy(update={"schedule": [], "random": None, "cluster": cluster})
        sim = Simulation(clean, opts, [])
        sim.run()
        _BASELINES[key] = (
            _final_loss(sim.events),
            _final_excess(sim.events),
            compute_goodput(sim.events, cluster.algorithm.num_fragments),
        )
    return _BASELINES[key]


def baseline_band(scenario: Scenario, opts: SimOptions) -> Band | None:
    """The parity band as the real controller builds it: each fault-free run's final loss, floor and excess over
    it, at the cluster seeds s, s+1, … (``checks.parity.baseline_seeds`` of them); None if one never finished."""
    seeds = [scenario.cluster.seed + k for k in range(scenario.checks.parity.baseline_seeds)]
    runs = [_fault_free(scenario, opts, seed) for seed in seeds]
    if any(loss is None or excess is None for loss, excess, _ in runs):
        return None
    losses = [float(loss) for loss, _, _ in runs]  # type: ignore[arg-type]
    excess = [float(x) for _, x, _ in runs]  # type: ignore[arg-type]
    goodputs = [float(g) for _, _, g in runs if g is not None]
    return Band(
        seeds=seeds,
        losses=losses,
        floors=[a - b for a, b in zip(losses, excess)],
        excess=excess,
        goodputs=goodputs if len(goodputs) == len(runs) else [],
    )


def simulate(
    scenario: Scenario, opts: SimOptions | None = None, planned: list[Planned] | None = None
) -> SimResult:
    """Run ``scenario`` in deterministic mode and judge it with the chaos checkers."""
    opts = opts or SimOptions()
    planned = plan(scenario) if planned is None else planned
    sim = Simulation(scenario, opts, planned)
    timed_out = sim.run()
    history = History(sorted(sim.records, key=lambda r: r.ts), sorted(sim.events, key=lambda e: e.ts))
    judged = opts.baseline and scenario.checks.needs_baseline
    base = baseline_loss(scenario, opts) if judged else None
    band = baseline_band(scenario, opts) if judged else None
    verdicts = run_checks(
        CheckInput(
            history,
            RunFacts.of(scenario),
            scenario.checks,
            base,
            baseline_band=tuple(band.excess) if band else (),
            audit_files=sim.audit.files,
            baseline_goodput=tuple(band.goodputs) if band else (),
            initial_params=sim.problem.init_params(),
            final_checkpoint=sim.syncer.checkpoint[0] if sim.syncer.checkpoint is not None else {},
            inner_steps=sim.inner_steps,
        )
    )
    status, code = overall(verdicts)
    if timed_out:
        status, code = "timeout", 2
    return SimResult(
        scenario,
        history,
        verdicts,
        status,
        code,
        base,
        _final_loss(sim.events),
        sim.loop.now,
        timed_out,
        sim.loop.handled,
        sim.audit,
        stalled=sim.stalled is not None,
        baseline_band=band,
    )
