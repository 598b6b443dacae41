"""Run one of our scenarios against torchft: a Lighthouse and one process per replica group, our fault plan and
injectors, our checks where torchft gives them their evidence.

    python -m peers.torchft.run kill-and-rejoin [--out runs/torchft] [--inner-steps 480] [train.py's options …]

The units are named as our trainer's, so a built-in scenario's schedule applies unchanged: ``learner-i`` is replica
group i (``peers.torchft.train``), ``syncer`` is the Lighthouse (torchft's quorum server: its analogue of our syncer,
though no parameters pass through it). Process faults (kill, stop, pause, slow, syncer crash) act through the same
injectors as on our trainer (faults.process, on :class:`TorchftCluster`). torchft's groups connect to each other on
ports they choose, so network faults need a network namespace per group: :class:`NamespacedCluster` (the default,
root: faults.netns) runs each group in its own; ``--network loopback`` runs them all on loopback, where network
faults are refused.

The groups write our events (see train.py); from them this runner derives the syncer-side record the checks read —
one ``merge`` per committed (fragment, version), its participants the groups that hold it, a ``syncer_start`` per
Lighthouse start, ``finished`` when the last group stopped — and judges with the checks whose evidence that is
(:data:`TORCHFT`: chaos.sut), plus ``agreement`` (every group of a committed step holds the same bits). The others are
not applicable, each with its reason, never passed; so is a scenario whose faults could not act here. Parity needs
a band of torchft's own fault-free runs (``band``: peers.torchft.findings runs one). Writes
``<out>/<scenario>-<seed>/run.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaos.checkers import CheckInput, RunFacts, Verdict, overall, run_checks
from chaos.checkers.agreement import agreement
from chaos.controller import _shielded, _signals_interrupt
from chaos.fault_plan import plan
from chaos.history import FaultOp, History, Phase, Recorder
from chaos.interpreter import Heal, Inject, PlanInterpreter, carry_out
from chaos.scenario import Scenario, scenario_with
from chaos.sut import SystemUnderTest
from faults.base import SYNCER, Fault
from faults.errors import FaultError, TargetError
from faults.netns import Namespaces
from faults.toxiproxy import Toxiproxy
from trainer import events as ev
from trainer.lifeline import guarded

ROOT = Path(__file__).resolve().parents[2]
# What torchft gives the checks (chaos.sut): the groups' own events, and merges and a result (the mean of the groups'
# final evals: result_eval) derived from them; not the rest.
TORCHFT = SystemUnderTest(
    "torchft",
    frozenset({"merges", "learner_logs", "syncer_evals"}),
    {
        "uploads": "its all-reduce has no uploads to count, accept or refuse",
        "checkpoints": "it keeps no checkpoint here: a healing group copies a live peer's state",
        "kept_merges": "its merges are all-reduces inside the groups: nothing keeps their inputs",
        "fault_free_band": "no band of its own fault-free runs was given (peers.torchft.findings runs one)",
        "reference_run": "the reference is our synchronous DiLoCo, not torchft's",
    },
)
NO_PROXIES = "torchft's groups connect to each other directly: network faults need a namespace per group"
STEP_ERRORS = (FaultError, TargetError, OSError)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TorchftCluster:
    """The Lighthouse (``syncer``) and the replica groups (``learner-i``) as process groups of their own; the
    :class:`faults.base.Cluster` our process faults act on."""

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        inner_steps: int,
        extra: tuple[str, ...] = (),
        entry: dict[str, list[str]] | None = None,
    ) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.inner_steps = inner_steps
        self.extra = extra  # more arguments for every group (torchft's settings: --quorum-retries …)
        # Per group, another module to run it, with its own arguments (tests plant defects so).
        self.entry = entry or {}
        self.port = _free_port()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts: dict[str, int] = {}
        self._ids = [f"learner-{i}" for i in range(scenario.cluster.algorithm.num_learners)]

    def learners(self) -> list[str]:
        return list(self._ids)

    # Where the units run and are reached: all on loopback here; NamespacedCluster puts each group in its own
    # network namespace.
    host = "127.0.0.1"  # the Lighthouse's address

    def unit_host(self, unit: str) -> str:
        return "127.0.0.1"

    def prefix(self, unit: str) -> list[str]:
        return []

    def unit_env(self, unit: str) -> dict[str, str]:
        return {}

    def bring_up(self) -> None:
        self.start(SYNCER)
        for lid in self.learners():
            self.start(lid)

    @property
    def toxiproxy(self) -> Toxiproxy:
        raise FaultError(NO_PROXIES)

    def proxy(self, learner_id: str) -> str:
        raise FaultError(NO_PROXIES)

    def _known(self, unit: str) -> None:
        if unit != SYNCER and unit not in self._ids:
            raise TargetError(f"unknown unit {unit!r}; this cluster has {[SYNCER, *self._ids]}")

    def alive(self, unit: str) -> bool:
        self._known(unit)
        p = self.procs.get(unit)
        return p is not None and p.poll() is None

    def signal(self, unit: str, sig: int) -> bool:
        if not self.alive(unit):
            return False
        try:
            os.killpg(self.procs[unit].pid, sig)
        except ProcessLookupError:
            return False
        return True

    def start(self, unit: str, *, corrupt: str | None = None) -> None:
        self._known(unit)
        if corrupt:
            raise FaultError("a corrupt torchft group is not implemented")
        if self.alive(unit):
            raise FaultError(f"{unit} is running; cannot start another")
        n = self.starts.get(unit, 0)
        self.starts[unit] = n + 1
        if unit == SYNCER:
            lighthouse = str(Path(sys.executable).with_name("torchft_lighthouse"))
            cmd = [lighthouse, "--min_replicas", "1", "--bind", f"{self.host}:{self.port}"]
            cmd += ["--join_timeout_ms", "1000", "--heartbeat_timeout_ms", "2000"]
        else:
            c = self.scenario.cluster
            a = c.algorithm
            cmd = [
                sys.executable,
                "-m",
                *self.entry.get(unit, ["peers.torchft.train"]),
                "--replica-id",
                unit,
                "--index",
                unit.rsplit("-", 1)[1],
                "--incarnation",
                str(n),
                "--lighthouse",
                f"http://{self.host}:{self.port}",
                "--host",
                self.unit_host(unit),
                "--events",
                str(self.run_dir / "events" / f"{unit}.jsonl"),
                "--seed",
                str(c.seed),
                "--fragments",
                str(max(a.num_fragments, 3)),
                "--sync-every",
                str(a.sync_every),
                "--outer-steps",
                str(self.inner_steps // a.sync_every * max(a.num_fragments, 3)),
                "--step-delay-s",
                str(c.learner.step_delay_s),
            ]
        log = open(self.run_dir / "logs" / f"{unit}.log", "ab")
        env = {**os.environ, "PYTHONPATH": str(ROOT), **self.unit_env(unit)}
        cmd = guarded(self.prefix(unit) + cmd, os.getpid())  # dies with this runner, even by SIGKILL
        self.procs[unit] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
        )
        log.close()

    def exit_code(self, unit: str) -> int | None:
        p = self.procs.get(unit)
        return None if p is None else p.poll()

    def stop(self, unit: str, timeout_s: float = 10.0) -> None:
        if not self.alive(unit):
            return
        self.signal(unit, signal.SIGCONT)
        self.signal(unit, signal.SIGTERM)
        try:
            self.procs[unit].wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(unit, signal.SIGKILL)
            self.procs[unit].wait(10)

    def teardown(self) -> dict[str, int | None]:
        """SIGKILL every process group still running and reap it (then remove the network: NamespacedCluster);
        never raises."""
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return {u: p.wait(10) for u, p in self.procs.items()}


class NamespacedCluster(TorchftCluster):
    """Each replica group in a network namespace of its own on one bridge (faults.netns), the Lighthouse on the
    bridge's address in the root namespace: network faults act on a group's interface (faults.base.OnNamespaces)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._ns = Namespaces.for_run(f"{self.run_dir}-{time.time_ns()}", self.learners())
        self.host = self._ns.gateway

    @property
    def namespaces(self) -> Namespaces:
        return self._ns

    def unit_host(self, unit: str) -> str:
        return self._ns.address(unit)

    def prefix(self, unit: str) -> list[str]:
        return [] if unit == SYNCER else self._ns.exec_prefix(unit)

    def unit_env(self, unit: str) -> dict[str, str]:
        return {} if unit == SYNCER else {"GLOO_SOCKET_IFNAME": "eth0"}  # gloo's peers: the namespace's interface

    def bring_up(self) -> None:
        self._ns.up()
        super().bring_up()

    def teardown(self) -> dict[str, int | None]:
        codes = super().teardown()
        self.network_problems = self._ns.teardown()
        return codes


def group_settings(scenario: Scenario) -> tuple[object, ...]:
    """What of a scenario's cluster reaches torchft's groups (their command line): two scenarios with the same train
    the same model the same way, fault-free (so share a fault-free band); the syncer's settings do not reach them."""
    c = scenario.cluster
    a = c.algorithm
    return (c.seed, a.num_learners, a.num_fragments, a.sync_every, c.learner.step_delay_s)


def derived_events(events: list[ev.Event], lighthouse_starts: Iterable[float]) -> list[ev.Event]:
    """The syncer-side record the checks read, derived from the groups' own: a ``syncer_start`` per Lighthouse start,
    a ``merge`` per committed (fragment, version) with the groups that hold it (at the first one's ``apply``), and a
    ``finished`` when the last group stopped."""
    out: list[ev.Event] = []
    nfrag = max((len(e.versions) for e in events if isinstance(e, ev.StateFetch | ev.LearnerJoin)), default=1)
    for i, ts in enumerate(lighthouse_starts):
        out.append(
            ev.SyncerStart(
                ts=ts,
                source="syncer",
                syncer_incarnation=f"lighthouse.{i}",
                address="",
                config_hash="",
                versions=[0] * nfrag,
                restored_from_merges=-1 if i == 0 else 0,
                pid=0,
            )
        )
    incarnation: dict[str, str] = {}
    held: dict[tuple[int, int], list[tuple[float, str, str]]] = {}
    for e in sorted(events, key=lambda e: e.ts):
        if isinstance(e, ev.LearnerStart):
            incarnation[e.source] = e.learner_incarnation
        elif isinstance(e, ev.Apply):
            held.setdefault((e.fragment, e.version), []).append((e.ts, e.source, incarnation.get(e.source, "")))
    for n, ((fragment, version), holders) in enumerate(
        sorted(held.items(), key=lambda kv: min(h[0] for h in kv[1]))
    ):
        ts = min(h[0] for h in holders)
        parts = [
            ev.ParticipantInfo(
                learner_id=who,
                incarnation=inc,
                weight=1 / len(holders),
                c_steps=0,
                c_tokens=0,
                base_version=version - 1,
            )
            for _, who, inc in sorted(set(holders))
        ]
        out.append(
            ev.Merge(
                ts=ts,
                source="syncer",
                fragment=fragment,
                version=version,
                base_version=version - 1,
                participants=parts,
                rule="mean",
                wait_s=0.0,
                quorum_wait_s=0.0,
                outer_grad_norm=0.0,
                merges_total=n + 1,
                tokens_total=0,  # an all-reduce counts no tokens
            )
        )
    stops = [e.ts for e in events if isinstance(e, ev.LearnerStop)]
    if stops:
        out.append(
            ev.Finished(ts=max(stops), source="syncer", tokens_total=0, merges_total=len(held), versions=[])
        )
    if result := result_eval(events):
        out.append(result)
    return out


def result_eval(events: list[ev.Event]) -> ev.Eval | None:
    """The run's result, as parity reads it: the mean of the final evals of the groups that finished (no model
    exists outside the groups; after the last commit each holds the global fragments and its own last steps)."""
    finals = {e.source: e for e in events if isinstance(e, ev.Eval) and e.final}
    if not finals:
        return None
    last = max(finals.values(), key=lambda e: e.ts)
    return ev.Eval(
        ts=last.ts,
        source="syncer",
        merges_total=last.merges_total,
        versions=last.versions,
        loss=sum(e.loss for e in finals.values()) / len(finals),
        loss_floor=float("nan"),
        tokens_total=sum(e.tokens_total for e in finals.values()),
        final=True,
    )


def commit_rate(history: History) -> dict[str, float | None]:
    """Committed versions per second while a fault acted and while none did, from steady state to the end (what a
    fault cost the whole job: a synchronous quorum runs at its slowest member's pace)."""
    steady = history.phase("steady")
    commits = sorted(e.ts for e in history.events if isinstance(e, ev.Merge))
    if not isinstance(steady, Phase) or not commits:
        return {"faulted": None, "clear": None}
    end = commits[-1]
    windows = [(w.start, w.end if w.end is not None else end) for w in history.fault_windows()]

    def faulted(t: float) -> bool:
        return any(a <= t < b for a, b in windows)

    span_f = sum(max(0.0, min(b, end) - max(a, steady.ts)) for a, b in windows)
    span_c = end - steady.ts - span_f
    n_f = sum(1 for t in commits if t >= steady.ts and faulted(t))
    n_c = sum(1 for t in commits if t >= steady.ts and not faulted(t))
    return {
        "faulted": round(n_f / span_f, 2) if span_f > 0 else None,
        "clear": round(n_c / span_c, 2) if span_c > 0 else None,
    }


def run(
    name: str,
    out: Path,
    inner_steps: int,
    timeout_s: float,
    fault_free: bool = False,
    extra: tuple[str, ...] = (),
    entry: dict[str, list[str]] | None = None,
    network: str = "namespaces",
    band: Sequence[float] = (),
    seed: int | None = None,
) -> dict[str, object]:
    changes: dict[str, Any] = {"name": f"{name}-fault-free", "schedule": []} if fault_free else {}
    if seed is not None:  # another draw of the data and initial model (a band's run)
        changes.update(name=f"{changes.get('name', name)}-seed{seed}", cluster={"seed": seed})
    scenario = scenario_with(name, **changes)
    run_dir = out / f"{scenario.name}-{scenario.seed}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a run directory is one run's (events files are appended to)
    (run_dir / "events").mkdir(parents=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    recorder = Recorder(run_dir / "controller.jsonl")
    cluster = (NamespacedCluster if network == "namespaces" else TorchftCluster)(
        scenario, run_dir, inner_steps, extra, entry
    )
    lighthouse_starts: list[float] = []
    faults: dict[str, Fault] = {}
    t_start = time.time()
    try:
        with _signals_interrupt():  # SIGTERM unwinds like Ctrl-C: the finally below runs
            recorder.add(Phase(name="bring_up", detail={}))  # start-up: bring-up to the first commit (the bounds')
            lighthouse_starts.append(time.time())
            cluster.bring_up()
            steady = _wait_first_commit(run_dir, time.time() + 120)
            recorder.add(Phase(ts=steady, name="steady", detail={"merges": 1}))
            interp = PlanInterpreter(plan(scenario), origin=steady)
            deadline = time.time() + timeout_s
            while True:
                # The result is fixed once a group trained its budget and exited: no fault starts after it (as the
                # controller does), and the run ends when no group runs — a group a fault holds down is not
                # restarted then to train a model of its own from scratch.
                fixed = any(cluster.exit_code(lid) == 0 for lid in cluster.learners())
                if not any(cluster.alive(lid) for lid in cluster.learners()) and (fixed or not interp.active):
                    break  # (no group left, and none to bring back: every group crashed, say)
                if time.time() > deadline:
                    raise TimeoutError(f"{name}: not finished within {timeout_s} s")
                for step in interp.due(time.time(), 0, result_fixed=fixed):
                    p = step.planned
                    if isinstance(step, Inject):
                        faults[p.fault_id] = p.build()
                    if (fault := faults.get(p.fault_id)) is not None:
                        _carry_out(step, fault, cluster, recorder)
                        if isinstance(step, Heal):
                            del faults[p.fault_id]
                            if p.kind == "syncer_crash":
                                lighthouse_starts.append(time.time())
                time.sleep(0.1)
            for heal in interp.finish():
                if (fault := faults.pop(heal.planned.fault_id, None)) is not None:
                    _carry_out(heal, fault, cluster, recorder)
            recorder.add(Phase(name="finished", detail={"merges": 0}))
    finally:
        with _shielded():  # a second Ctrl-C must not leave processes or namespaces behind
            codes = cluster.teardown()
            recorder.close()
    group_events = [e for f in sorted((run_dir / "events").glob("*.jsonl")) for e in ev.read_events(f)]
    history = History(
        list(recorder.records),
        sorted(group_events + derived_events(group_events, lighthouse_starts), key=lambda e: e.ts),
    )
    # Parity's band: torchft's own fault-free runs of this cluster (the caller's), the first at the run's seed.
    inp = CheckInput(
        history, RunFacts.of(scenario), scenario.checks, band[0] if band else None, baseline_band=tuple(band)
    )
    sut = replace(TORCHFT, provides=TORCHFT.provides | {"fault_free_band"}) if band else TORCHFT
    verdicts: list[Verdict] = [agreement(group_events), *run_checks(inp, sut)]
    evals = {e.source: e.loss for e in group_events if isinstance(e, ev.Eval) and e.final}
    refused = [
        f"{r.fault_id} ({r.fault_kind}): {r.error}"
        for r in recorder.records
        if isinstance(r, FaultOp) and r.action == "inject" and r.outcome == "fail"
    ]
    result = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "command": f"python -m peers.torchft.run {name} --inner-steps {inner_steps}"
        + (" --fault-free" if fault_free else "")
        + ("" if network == "namespaces" else f" --network {network}")
        + ("" if seed is None else f" --seed {seed}")
        + "".join(f" {x}" for x in extra),
        "wall_s": round(time.time() - t_start, 1),
        "exit_codes": codes,
        "final_eval": evals,
        "band": list(band),
        "commit_rate": commit_rate(history),
        "verdicts": [v.to_json() for v in verdicts],
        "refused_faults": refused,
        "network": network,
        "network_left": getattr(cluster, "network_problems", []),
        # A scenario whose faults could not act here tested nothing of them: not applicable, whatever the checks say.
        "status": "not_applicable" if refused else overall(verdicts)[0],
    }
    (run_dir / "run.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def _carry_out(step: Inject | Heal, fault: Fault, cluster: TorchftCluster, recorder: Recorder) -> None:
    act = fault.inject if isinstance(step, Inject) else fault.heal
    carry_out(
        step, functools.partial(act, cluster), recorder.add, errors=STEP_ERRORS, description=fault.describe()
    )


def _wait_first_commit(run_dir: Path, deadline: float) -> float:
    while time.time() < deadline:
        for f in (run_dir / "events").glob("*.jsonl"):
            for e in ev.read_events(f, strict=False):
                if isinstance(e, ev.Apply):
                    return e.ts
        time.sleep(0.2)
    raise TimeoutError("no committed step within 120 s of the start: see the groups' logs")


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("scenario")
    a.add_argument("--out", type=Path, default=ROOT / "runs" / "torchft")
    a.add_argument(
        "--inner-steps", type=int, default=480, help="inner steps each group trains (H per fragment sync)"
    )
    a.add_argument("--timeout-s", type=float, default=300.0)
    a.add_argument("--fault-free", action="store_true", help="the scenario's cluster without its schedule")
    a.add_argument(
        "--network",
        choices=("namespaces", "loopback"),
        default="namespaces",
        help="namespaces (root): each group in its own, so network faults act; loopback: network faults refused",
    )
    a.add_argument("--seed", type=int, default=None, help="the cluster's seed (data, initial model): a band's run")
    args, extra = a.parse_known_args(argv)
    try:
        r = run(
            args.scenario,
            args.out,
            args.inner_steps,
            args.timeout_s,
            args.fault_free,
            tuple(extra),
            network=args.network,
            seed=args.seed,
        )
    except KeyboardInterrupt:
        print("interrupted: every process stopped, the network removed", file=sys.stderr)
        return 130
    print(json.dumps({k: r[k] for k in ("scenario", "status", "wall_s", "final_eval", "refused_faults")}))
    for v in r["verdicts"]:  # type: ignore[attr-defined]
        print(f"  {v['name']}: {v['status']}: {v['summary']}")
    return 0 if r["status"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
