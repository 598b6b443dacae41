"""The gRPC syncer and deterministic mode's syncer are one syncer (issue 39).

Both shells are driven through the same schedule of joins, reports, uploads and leaves on one virtual clock: the
real :class:`trainer.syncer.SyncerService` (its RPC handlers called in process, its ``clock`` the event loop's,
its merge loop replaced by :meth:`~trainer.syncer.SyncerService.run_due` at the moments deterministic mode's node
ticks) and :class:`chaos.sim.syncer_node.SyncerNode` on that event loop. They must write the same events, in the
same order, with the same fields (wall-clock stamps and the places files went aside), the fixed result at the same
token count, and exit at the same moment. A planted divergence in either shell fails it (the negative controls
below).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chaos.sim.clock import EventLoop
from chaos.sim.syncer_node import SyncerNode
from tests.support import tiny_config
from trainer import events as ev
from trainer.audit_log import AuditWriter
from trainer.client import upload_messages, upload_request
from trainer.config import RunConfig
from trainer.core.fragments import partition_tensors
from trainer.core.rounds import round_at
from trainer.core.syncer_driver import EXIT_POLL_S
from trainer.core.syncer_records import Contribution
from trainer.policy import policy_from_config
from trainer.proto import diloco_pb2 as pb
from trainer.syncer import SyncerService
from trainer.training import TrainingSetup
from trainer.wire import encode_tensors

LEARNERS = {"learner-0": 0.10, "learner-1": 0.13}  # seconds a step: two paces, so quorum and grace both matter
REPORT_S = 0.25
T_END = 60.0
# What the shells may write differently: where (file paths, addresses, process ids and names) and the real
# upload's or checkpoint's measured duration — never what was decided, nor when (``ts`` is compared).
UNCOMPARED = {"path", "address", "pid", "syncer_incarnation", "seconds", "file"}


def _config(**overrides: object) -> RunConfig:
    base = {
        "algorithm.num_learners": 2,
        "algorithm.num_fragments": 2,
        "algorithm.sync_every": 4,
        "token_budget": 40 * 16 * 64,
        "syncer.checkpoint_every_merges": 3,
        "syncer.eval_every_merges": 4,
        "syncer.liveness_timeout_s": 2.0,
    }
    return tiny_config(**{**base, **overrides})


class _Problem:
    """The real model's initial parameters for the simulated syncer (its evals are compared apart)."""

    def __init__(self, init: dict[str, np.ndarray]) -> None:
        self.params, self.floor = init, 0.0

    def init_params(self) -> dict[str, np.ndarray]:
        return {k: np.array(v, copy=True) for k, v in self.params.items()}

    def real_bytes(self, names: Any) -> int:
        return 0

    def loss(self, params: Any) -> float:
        return 0.0


class _Host:
    """What SyncerNode needs of a simulation (chaos.sim.host.SimHost), without learners or a network."""

    def __init__(self, cfg: RunConfig, init: dict[str, np.ndarray], loop: EventLoop) -> None:
        self.cfg, self.config_hash, self.loop = cfg, cfg.config_hash(), loop
        self.policy = policy_from_config(cfg)
        self.problem = _Problem(init)
        self.fragments = partition_tensors({k: int(v.size) for k, v in init.items()}, cfg.algorithm.num_fragments)
        self.audit = AuditWriter(None, keep_fraction=1.0, seed=cfg.seed)
        self.events: list[ev.Event] = []

    def emit(self, source: str, kind: type, **fields: Any) -> None:
        self.events.append(kind(ts=self.loop.now, source=source, **fields))

    def on_merge(self, merges_total: int) -> None:
        pass

    def on_syncer_exit(self) -> None:
        pass


class _Driven(SyncerService):
    """The real service without its merge thread: the test calls run_due when deterministic mode's node ticks."""

    def _merge_loop(self) -> None:
        return


def _upload_chunks(c: Contribution) -> Iterator[pb.UploadChunk]:
    header, payload = upload_request(
        c.learner_id, c.incarnation, c.fragment, c.base_version, c.tensors, c.c_steps, c.c_tokens, round=c.round
    )
    return upload_messages(header, payload)


class _Pair:
    """Both shells on one event loop; every scripted call goes to both at the same virtual time."""

    def __init__(self, cfg: RunConfig, run_dir: Path, away: tuple[str, float, float] | None = None) -> None:
        self.cfg, self.loop = cfg, EventLoop()
        self.away = away  # (learner, from, to): silent in between (a killed process), then a new incarnation
        self.inc = {lid: "i0" for lid in LEARNERS}
        init = TrainingSetup.from_config(cfg).init_params()
        self.host = _Host(cfg, {k: np.asarray(v) for k, v in init.items()}, self.loop)
        self.node = SyncerNode(self.host)  # type: ignore[arg-type]  # _Host is the SimHost a node needs
        now = lambda: self.loop.now  # noqa: E731
        self.real = _Driven(cfg, run_dir, exit_on_finish=False, clock=now, timer=now)
        tick = self.node._tick
        self.over_since: float | None = None

        def both_tick() -> None:  # the node's merge timer fired: the real loop wakes at the same moment
            self.real.run_due(self.loop.now)
            tick()
            if self.over_since is None and self.real.stopped():
                # As the real syncer's main loop: once the final eval is written and training is over, it polls
                # its exit rule (on its own; deterministic mode's exit is not consulted)
                assert self.real.done.wait(60), "the real syncer's final eval was not written"
                self.over_since = self.loop.now
                self.loop.after(EXIT_POLL_S, self.real_exit)

        self.node._tick = both_tick  # type: ignore[method-assign]
        self.node.start()
        self.tps = 16 * 64  # inner.batch_size × seq_len of the tiny model
        self.uploaded: dict[tuple[str, int], tuple[int, int]] = {}  # (learner, fragment) -> (round, step)
        self.stopped: set[str] = set()

    def real_exit(self) -> None:
        assert self.over_since is not None
        if self.real.exit_due(self.over_since):
            self.real.shutdown("finished")
        else:
            self.loop.after(EXIT_POLL_S, self.real_exit)

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        self.loop.at(t, fn, *args)

    # ---- the scripted learners' calls, to both shells -----------------------------------
    def gone(self, lid: str) -> bool:
        """Inside its away window; at its end it comes back as a new process (joins again, uploads afresh)."""
        if self.away is None or self.away[0] != lid or self.loop.now < self.away[1]:
            return False
        if self.loop.now < self.away[2]:
            return True
        if self.inc[lid] == "i0":
            self.inc[lid] = "i1"
            self.join(lid)
            self.uploaded = {
                k: (-1, int(self.loop.now / LEARNERS[lid])) if k[0] == lid else v for k, v in self.uploaded.items()
            }
        return False

    def join(self, lid: str) -> None:
        inc = self.inc[lid]
        self.real.Join(pb.JoinRequest(learner_id=lid, incarnation=inc, config_hash=self.real.config_hash), None)
        self.node.handle_join(lid, inc, lambda *_: None, lambda: None)

    def report(self, lid: str) -> None:
        if lid in self.stopped or self.node.exited:
            return
        if self.gone(lid):
            self.loop.after(REPORT_S, self.report, lid)
            return
        step, inc = int(self.loop.now / LEARNERS[lid]), self.inc[lid]
        stops: list[bool] = []
        reply = self.real.Report(
            pb.ReportRequest(
                learner_id=lid, incarnation=inc, step=step, tokens=step * self.tps, step_time_s=LEARNERS[lid]
            ),
            None,
        )
        self.node.handle_report(
            lid, inc, step, step * self.tps, LEARNERS[lid], lambda r, _n: stops.append(r[1]), lambda: None
        )
        assert stops == [reply.stop], "the shells disagree on whether the learner must stop"
        if reply.stop:  # it collected its stop signal: it leaves
            self.stopped.add(lid)
            self.real.Leave(pb.LeaveRequest(learner_id=lid, incarnation=inc, why="finished"), None)
            self.node.handle_leave(lid, inc, "finished", lambda *_: None, lambda: None)
            return
        self.loop.after(REPORT_S, self.report, lid)

    def step(self, lid: str) -> None:
        """After each of its steps, a learner uploads every fragment whose round opened since its last upload."""
        st = self.node.state
        if lid in self.stopped or st is None or self.node.exited:
            return
        if self.gone(lid):
            self.loop.after(LEARNERS[lid], self.step, lid)
            return
        step = int(round(self.loop.now / LEARNERS[lid]))
        clock_step = st.cluster_step(self.loop.now)
        for p in range(len(self.host.fragments)):
            r = round_at(st.algorithm.fragment_schedule(), p, clock_step)
            last_round, last_step = self.uploaded.get((lid, p), (-1, 0))
            if r <= last_round or step <= last_step:
                continue
            self.uploaded[(lid, p)] = (r, step)
            rng = np.random.default_rng([list(LEARNERS).index(lid), p, r])
            tensors = {
                n: (1e-4 * rng.standard_normal(st.params[n].shape)).astype(np.float32)
                for n in self.host.fragments[p].names
            }
            c_steps = step - last_step
            c = Contribution(lid, self.inc[lid], p, st.versions[p], tensors, c_steps, c_steps * self.tps, round=r)
            assert list(self.real.state.versions) == list(st.versions), "the shells' versions diverged"
            self.real.Upload(_upload_chunks(c), None)
            self.node.handle_upload_header(c)
            self.node.handle_upload(c, len(encode_tensors(tensors)[1]), lambda *_: None, lambda: None)
        self.loop.after(LEARNERS[lid], self.step, lid)

    def run(self) -> None:
        for lid in LEARNERS:
            self.at(0.0, self.join, lid)
            self.at(0.01, self.report, lid)
            self.at(LEARNERS[lid], self.step, lid)
        self.loop.run(until=T_END)
        assert self.node.exited, f"the simulated syncer did not exit within {T_END} virtual seconds"


def _without(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _without(v) for k, v in tree.items() if k not in UNCOMPARED}
    if isinstance(tree, list):
        return [_without(v) for v in tree]
    return tree


def _comparable(events: list[ev.Event]) -> list[tuple[str, Any]]:
    return [(e.kind, _without(e.model_dump(mode="json"))) for e in events if e.kind != "eval"]


def _run(
    tmp_path: Path, cfg: RunConfig, away: tuple[str, float, float] | None = None
) -> tuple[list[ev.Event], list[ev.Event]]:
    pair = _Pair(cfg, tmp_path / "real", away)
    try:
        pair.run()
    finally:
        pair.real.shutdown("test over")  # its eval thread stopped whatever happened (a no-op once it exited)
    real = ev.read_events(tmp_path / "real" / "events" / "syncer.jsonl")
    return real, pair.host.events


CASES = {
    "steady": ({}, None),
    "settle": ({"syncer.settle_s": 3.0}, None),
    # learner-1 is silent for 2.5 s (longer than the liveness timeout), then back as a new incarnation; the settle
    # phase waits for it to be merged again
    "away-and-back": ({"syncer.settle_s": 5.0, "token_budget": 80 * 16 * 64}, ("learner-1", 0.8, 3.3)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_real_syncer_and_deterministic_mode_write_the_same_events(tmp_path, case):
    overrides, away = CASES[case]
    real, sim = _run(tmp_path, _config(**overrides), away)
    kinds = [k for k, _ in _comparable(sim)]
    assert kinds.count("merge") >= 10 and "finished" in kinds and kinds[-1] == "syncer_stop", kinds
    assert [k for k, _ in _comparable(real)] == kinds  # the same kinds in the same order
    assert _comparable(real) == _comparable(sim)  # and the same fields
    finished = [e for e in real if e.kind == "finished"]
    assert (
        len(finished) == 1 and finished[0].tokens_total == [e for e in sim if e.kind == "finished"][0].tokens_total
    )
    # Evals are written by the real syncer's eval thread (a newer request may replace an older one): the final
    # one is at the same merge, and every other real eval is one deterministic mode also wrote.
    evals = {(e.merges_total, e.final) for e in sim if e.kind == "eval"}
    real_evals = [(e.merges_total, e.final) for e in real if e.kind == "eval"]
    assert set(real_evals) <= evals and [x for x in real_evals if x[1]] == [x for x in evals if x[1]]


def _diverges(tmp_path: Path) -> bool:
    overrides, away = CASES["away-and-back"]
    try:
        real, sim = _run(tmp_path, _config(**overrides), away)
    except AssertionError:
        return True
    return _comparable(real) != _comparable(sim)


def _exit_without_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic mode's exit writes no last checkpoint (the real syncer's shutdown does): as it was."""
    write = SyncerNode._checkpoint
    monkeypatch.setattr(
        SyncerNode, "_checkpoint", lambda self: None if self._stopped_at is not None else write(self)
    )


def _exit_after_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic mode waits out 2 × the liveness timeout though every learner has left."""
    monkeypatch.setattr(
        "chaos.sim.syncer_node.exit_due", lambda st, now, since: now - since > 2 * st.policy.liveness_timeout_s
    )


def _real_merge_without_due_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real syncer's merge event loses a field (due_wait_s) deterministic mode writes."""
    from trainer import syncer

    fields = syncer.merge_fields
    monkeypatch.setattr(syncer, "merge_fields", lambda *a, **k: {**fields(*a, **k), "due_wait_s": None})


@pytest.mark.parametrize("plant", [_exit_without_checkpoint, _exit_after_timeout, _real_merge_without_due_wait])
def test_a_planted_divergence_between_the_shells_is_seen(tmp_path, monkeypatch, plant):
    plant(monkeypatch)
    assert _diverges(tmp_path)
