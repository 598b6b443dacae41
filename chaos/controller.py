"""The controller: baseline, bring-up, faults, always-heal, collect, check, report.

Lifecycle of :func:`run_scenario` (Chaos Toolkit's, with its users' complaints fixed)::

    validate (already done: a Scenario is valid by construction)
    baseline   the same cluster without faults at a few cluster seeds (the parity band), cached by config hash;
               none when parity is off (Checks.needs_baseline)
    bring_up   Toxiproxy, one proxy per learner, syncer, learners
    steady     wait for the first merge; the fault schedule's times count from here
    faults     the fault plan, played: inject / heal by time or merge count, recording each step
    finished   the syncer reached the token budget
    (stalled)  or the progress watchdog ended the run: no merge and no new tokens, outside faults, for longer
               than a bound derived from the run's own pace (chaos.watchdog); it is judged (liveness fails)
    teardown   heal what is active, delete this run's proxies, stop every process;
               runs on every exit path, SIGINT/SIGTERM and exceptions included
    check      pure checkers over the history; report.json, report.md, timeline.png

Exit codes (chaos.exit_codes): 0 every check passed, 1 a check failed (a
stalled run among them), 2 the run could not be done (or was interrupted, or
ran into the scenario's timeout_s while still progressing), 3 a check could
not decide.

Example:
    result = run_scenario(load_scenario("chaos/scenarios/kill-one-learner.yaml"), RunOptions(Path("runs/k1")))
    print(result.exit_code, [v.status for v in result.verdicts])

Why one module: it is the run's lifecycle in order, a phase a method; what the phases call lives apart
(:mod:`chaos.backends`, :mod:`chaos.fault_plan`, :mod:`chaos.interpreter`, :mod:`chaos.checkers`, :mod:`chaos.report`).
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos import baselines
from chaos.analysis import RunResult, analyse
from chaos.backends import Backend
from chaos.backends.local import LocalBackend
from chaos.errors import ChaosError, RunError
from chaos.fault_metrics import FaultMetrics
from chaos.fault_plan import Planned, plan
from chaos.history import (
    EventTail,
    History,
    NotRun,
    NotRunPhase,
    Phase,
    PlanRecord,
    Recorder,
    StalledPhase,
    Teardown,
    TeardownPhase,
)
from chaos.interpreter import Heal, Inject, PlanInterpreter, carry_out
from chaos.run_report import Baseline
from chaos.scenario import Scenario
from chaos.watchdog import FIRST_MERGE_S, POLL_S, Progress, stalled
from faults.base import Fault
from faults.errors import FaultError
from faults.kinds import syncer_only
from faults.toxiproxy import Toxiproxy
from faults.toxiproxy_server import ToxiproxyServer
from trainer.config import RunConfig
from trainer.errors import TrainerError
from trainer.launch import see_log
from trainer.metrics import RunMetrics, summarize_run
from trainer.telemetry import MetricsServer, announce

DEFAULT_CACHE = Path(".cache/diloco-chaos/baselines")
CHORE_S = 0.05  # the loop's chores (is the syncer alive, a progress line) wait when a fault is due sooner
STEP_ERRORS = (FaultError, TrainerError, ChaosError)  # a fault step that raises one of these is recorded as failed


BackendFactory = Callable[[RunConfig, Path, Toxiproxy, str], Backend]


@dataclass
class RunOptions:
    out_dir: Path
    toxiproxy_url: str | None = None  # None: start our own server for this run
    backend: BackendFactory = LocalBackend  # (config, run_dir, toxiproxy, proxy tag) -> Backend
    baseline: bool = True
    baseline_cache: Path = DEFAULT_CACHE
    progress: Callable[[str], None] | None = print
    steady_timeout_s: float = FIRST_MERGE_S  # no first merge by then: the run is ended and judged (chaos.watchdog)
    poll_s: float = 0.1  # the scheduling loop's longest sleep (it wakes at the plan's next step before that)
    # False: sleep poll_s whatever the plan says (the controller before it woke on time; for the fault-latency
    # benchmark's side-by-side run only).
    wake_at_plan: bool = True
    # Benchmarks end a run early (e.g. on reaching a target eval loss): called with each polled syncer
    # Status; True ends the run as if the budget were reached, except that nothing waits for learners to leave.
    stop_when: Callable[[Any], bool] | None = None
    # The controller serves /metrics while a run executes (chaos.fault_metrics: which faults are active, for
    # dashboards' annotations); None: it does not. 0: a free port. (Trainer processes always serve theirs.)
    metrics_port: int | None = 0
    metrics_host: str = "127.0.0.1"
    # The fault-free runs after the chaos run rather than before. Alone, the same time; beside another process
    # computing them into the same cache (a test on another worker: tests/nightly), the two run at once and this
    # run then waits on the cache's lock and reads them.
    baseline_after: bool = False


@dataclass
class _Seen:
    """What the status thread saw (:meth:`Controller._watch`), read by the scheduling loop."""

    result_fixed: bool = False  # the syncer reached the budget
    stop_when_met: bool = False
    stall: Any = None  # the watchdog's stall: the run ends and is judged
    error: BaseException | None = None  # the thread failed: the loop raises it


class Interrupted(ChaosError):
    """SIGINT or SIGTERM arrived; everything was healed and stopped."""


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C while a run is in progress (only possible from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM while cleaning up: a second Ctrl-C must not leave toxics or processes behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def toxiproxy_for(opts: RunOptions, log_path: Path, seed: int | None = None) -> Iterator[Toxiproxy]:
    """The Toxiproxy server given by URL, or one started (and always stopped) for this run, its randomness
    (latency jitter) seeded with ``seed``, the scenario's."""
    if opts.toxiproxy_url:
        client = Toxiproxy(opts.toxiproxy_url)
        client.version()  # fail now, with the URL in the message, not at the first fault
        yield client
        return
    with ToxiproxyServer(log_path=log_path, seed=seed) as server:  # entering starts it; leaving stops it
        yield server.client()


class _Execution:
    """One cluster run with a plan (empty for a baseline); heals and tears down on every exit path."""

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        toxi: Toxiproxy,
        planned: list[Planned],
        opts: RunOptions,
        label: str,
    ) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.planned = planned
        self.opts = opts
        self.label = label
        self.fault_metrics = FaultMetrics() if opts.metrics_port is not None else None
        self.metrics_server: MetricsServer | None = None
        self.recorder = Recorder(
            run_dir / "controller.jsonl", observers=(self.fault_metrics.observe,) if self.fault_metrics else ()
        )
        tag = f"{scenario.name}-{label}-{uuid.uuid4().hex[:6]}"
        self.backend: Backend = opts.backend(scenario.cluster, run_dir, toxi, tag)
        self.toxi = toxi
        self.interp = PlanInterpreter(planned, origin=0.0)  # re-made with the steady time as its origin
        self.faults: dict[str, Fault] = {}  # the injector of each active fault
        self.steady_at: float | None = None
        self.merges = 0
        self.status_line = ""
        self.progress = Progress()  # the syncer's counters at the last status poll (chaos.watchdog)
        self.syncer_events = EventTail(self.backend.events_dir / "syncer.jsonl", kinds=("merge", "finished"))

    def say(self, msg: str) -> None:
        if self.opts.progress:
            self.opts.progress(f"[{self.label}] {msg}")

    # ---- fault steps, each recorded as invoke then ok / fail (chaos.interpreter.carry_out) ---------------
    def inject(self, p: Planned, rel: float) -> None:
        fault = p.build()
        self.faults[p.fault_id] = fault
        err = carry_out(
            Inject(p),
            lambda: fault.inject(self.backend),
            self.recorder.add,
            errors=STEP_ERRORS,
            description=fault.describe(),
        )
        if err is not None:
            self.say(f"inject {p.fault_id} failed: {err}")
        else:
            self.say(f"+{rel:.1f}s inject {p.fault_id}: {fault.describe()}")

    def heal(self, step: Heal) -> None:
        p, why = step.planned, step.why
        fault = self.faults.pop(p.fault_id, None)
        if fault is None:  # its injector could not even be built: nothing was injected, nothing to heal
            return
        err = carry_out(
            step,
            lambda: fault.heal(self.backend),
            self.recorder.add,
            errors=STEP_ERRORS,
            description=fault.describe(),
        )
        if err is not None:
            self.say(f"heal {p.fault_id} failed: {err}")
        elif not step.skip:
            self.say(f"heal {p.fault_id}" + (f" ({why})" if why else ""))

    # ---- the run -------------------------------------------------------------------
    def _serve_metrics(self) -> None:
        if self.fault_metrics is None:
            return
        host, port = self.opts.metrics_host, self.opts.metrics_port
        try:
            self.metrics_server = MetricsServer.start(self.fault_metrics.registry, host, port or 0)
        except OSError as err:
            raise RunError(
                f"cannot serve the controller's metrics on {host}:{port}: {err}; pass another "
                "--metrics-port (0: a free one)"
            ) from None
        announce(self.run_dir, "controller", "controller", self.metrics_server)

    def execute(self) -> None:
        self._serve_metrics()
        self.recorder.add(
            PlanRecord(
                scenario=self.scenario.name, seed=self.scenario.seed, faults=[p.record() for p in self.planned]
            )
        )
        try:
            self.recorder.add(
                Phase(
                    name="bring_up",
                    detail={
                        "backend": self.backend.name,
                        "proxy_prefix": self.backend.tag,
                        "toxiproxy": self.toxi.url,
                    },
                )
            )
            try:
                self.backend.bring_up()
            except (TrainerError, FaultError) as err:
                raise RunError(f"bring-up failed: {err}; see {self.run_dir / 'logs'}") from None
            if self._wait_steady():
                self._loop()
            else:
                self._end(wait_for_learners=False)
        finally:
            with _shielded():
                self._teardown()

    def _poll_status(self, client: Any) -> Any:
        try:
            st = client.status()
        except (TrainerError, Exception):  # noqa: BLE001 - the syncer may be down on purpose
            return None
        self.merges = max(self.merges, st.merges)
        self.progress = self.progress.observe(st.merges, st.tokens, time.time())
        return st

    def _stall(self) -> Any:
        """The progress watchdog over what the run has recorded so far (chaos.watchdog): the stall, or None."""
        history = History(list(self.recorder.records), list(self.syncer_events.read()))
        return stalled(
            history,
            self.progress,
            time.time(),
            self.scenario.checks.liveness,
            first_merge_s=self.opts.steady_timeout_s,
        )

    def _stalled(self, stall: Any = None) -> bool:
        """On a stall (``stall``, or the watchdog's verdict now), record it (the liveness check reads it) and say
        so; the caller ends the run."""
        stall = stall or self._stall()
        if stall is None:
            return False
        self.recorder.add(StalledPhase(detail=stall))
        self.say(
            f"stalled: no progress for {stall.quiet_s:.1f}s, past the watchdog's bound {stall.bound_s:.1f}s "
            f"({stall.how}); ending the run to judge it"
        )
        return True

    def _wait_steady(self) -> bool:
        """Wait for the first merge; False when the watchdog's first-merge cap passed without one (recorded)."""
        with self.backend.client() as client:
            while True:
                st = self._poll_status(client)
                if st is not None and st.merges >= 1:
                    break
                if not self.backend.alive("syncer"):
                    raise RunError(
                        "the syncer exited during start-up; " + see_log(self.run_dir / "logs" / "syncer.log")
                    )
                if self._stalled():
                    return False
                time.sleep(0.2)
        self.steady_at = time.time()
        self.interp = PlanInterpreter(self.planned, origin=self.steady_at)
        # Recorded at the plan's origin: a fault's scheduling lag is measured from it.
        self.recorder.add(Phase(ts=self.steady_at, name="steady", detail={"merges": self.merges}))
        self.say("steady: first merge seen; the fault schedule's clock starts")
        return True

    def _syncer_fault_active(self) -> bool:
        return any(syncer_only(p.kind) or "syncer" in p.targets for p, _ in self.interp.active.values())

    def _watch(self, seen: _Seen, wake: threading.Event, done: threading.Event) -> None:
        """The status thread: the syncer's Status every POLL_S (merges, the result fixed, the stop condition) and
        the watchdog, off the scheduling loop, so that a slow or hung Status call never delays a fault; wakes the
        loop when the merge count moves (faults ``at_merge``) or the run must end."""
        try:
            with self.backend.client() as client:
                while not done.is_set():
                    before = self.merges
                    st = self._poll_status(client)
                    if st is not None:
                        seen.result_fixed = seen.result_fixed or bool(st.finished)
                        self.status_line = (
                            f"merges {st.merges} tokens {st.tokens}/{st.token_budget} "
                            f"eval {st.eval_loss:.3f}" + (" (settling)" if st.finished else "")
                        )
                        seen.stop_when_met = self.opts.stop_when is not None and self.opts.stop_when(st)
                    if not seen.stop_when_met:
                        seen.stall = self._stall()
                    if seen.stop_when_met or seen.stall is not None or self.merges != before:
                        wake.set()
                    if seen.stop_when_met or seen.stall is not None:
                        return
                    done.wait(POLL_S)
        except BaseException as err:  # noqa: BLE001 - handed to the loop, which raises it on its own thread
            seen.error = err
            wake.set()

    def _loop(self) -> None:
        assert self.steady_at is not None
        deadline = time.monotonic() + self.scenario.timeout_s
        stopped_early = stalled_run = False
        last_alive = last_say = 0.0
        seen, wake, done = _Seen(), threading.Event(), threading.Event()
        watcher = threading.Thread(target=self._watch, args=(seen, wake, done), name="status-watch", daemon=True)
        watcher.start()
        try:
            while True:
                wake.clear()
                if seen.error is not None:
                    raise seen.error
                if seen.stop_when_met:
                    stopped_early = True
                    self.say(f"stop condition met: {self.status_line}")
                    break
                if seen.stall is not None:
                    stalled_run = self._stalled(seen.stall)
                    break
                now = time.time()
                rel = now - self.steady_at
                # result fixed: the syncer reached the budget; a settle phase may follow, no new faults start
                for step in self.interp.due(now, self.merges, seen.result_fixed):
                    self.inject(step.planned, rel) if isinstance(step, Inject) else self.heal(step)
                nxt = self.interp.next_time()
                soon = nxt is not None and nxt - time.time() < CHORE_S  # a step due before a chore could end
                if not soon and time.monotonic() - last_alive > POLL_S:
                    last_alive = time.monotonic()
                    if not self.backend.alive("syncer") and not self._syncer_fault_active():
                        code = self.backend.exit_code("syncer")
                        if code != 0:
                            raise RunError(
                                f"the syncer exited with code {code} outside any fault; "
                                f"{see_log(self.run_dir / 'logs' / 'syncer.log')}"
                            )
                        break  # budget reached: the syncer finished and exited
                if time.monotonic() > deadline:  # the last resort: the watchdog ends a run that stops progressing
                    raise RunError(
                        f"the run did not finish within timeout_s = {self.scenario.timeout_s}s "
                        f"(last status: {self.status_line or 'none'}); it had not stopped progressing "
                        "outside faults, or the watchdog would have ended it: raise timeout_s, shrink the "
                        "token budget or shorten the faults"
                    )
                if not soon and time.monotonic() - last_say > 3.0:
                    last_say = time.monotonic()
                    act = ", ".join(f"{fid}:{p.kind}" for fid, (p, _) in self.interp.active.items())
                    self.say(f"+{rel:.0f}s {self.status_line}" + (f" | active {act}" if act else ""))
                # Sleep until the plan's next step (woken early by the status thread), at most poll_s: faults
                # start and heal on time, not on a poll's phase. wake_at_plan False: the fixed poll it replaced.
                wait = self.opts.poll_s
                if nxt is not None and self.opts.wake_at_plan:
                    wait = min(wait, max(nxt - time.time(), 0.0))
                wake.wait(wait)
        finally:
            done.set()
            watcher.join(timeout=30.0)
        if not stalled_run:
            self.recorder.add(
                Phase(name="finished", detail={"merges": self.merges, "stopped_early": stopped_early})
            )
        self._end(wait_for_learners=not (stopped_early or stalled_run))

    def _end(self, wait_for_learners: bool) -> None:
        """The run ended (finished, stopped early or stalled): record the faults never started, heal the active ones;
        after a finish, give the learners time to leave on their own."""
        if self.interp.not_run():
            self.recorder.add(NotRunPhase(detail=NotRun(faults=self.interp.not_run())))
        for heal in self.interp.finish():
            self.heal(heal)
        if wait_for_learners:
            self._wait_learners_exit(30.0)

    def _wait_learners_exit(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(self.backend.alive(lid) for lid in self.backend.learners()):
            time.sleep(0.2)

    def _proxies_left(self, attempts: int = 4, pause_s: float = 2.0) -> list[str]:
        """This run's proxies still on the server. Retried: a Toxiproxy API that stalls for a few seconds while
        containers stop (seen once in CI: one GET timed out) must not read as a leak; a persistent failure does."""
        err: FaultError | None = None
        for attempt in range(attempts):
            try:
                return [n for n in self.toxi.proxies() if n.startswith(self.backend.tag)]
            except FaultError as e:
                err = e
                if attempt + 1 < attempts:
                    time.sleep(pause_s)
        return [f"(could not list proxies after {attempts} attempts: {err})"]

    def _teardown(self) -> None:
        """Heal every active fault, delete this run's proxies, stop every process; record what was left."""
        interrupted = bool(self.interp.active)
        for heal in self.interp.finish(why="teardown"):  # restarting a unit now would only make a process to stop
            self.heal(heal)
        result = self.backend.teardown()
        self.recorder.add(
            TeardownPhase(
                detail=Teardown(
                    proxies_left=self._proxies_left(),
                    processes_left=self.backend.running_units(),
                    healed_on_teardown=interrupted,
                    exit_codes=result.exit_codes,
                    problems=result.problems,
                )
            )
        )
        self.recorder.close()
        if self.metrics_server is not None:
            self.metrics_server.stop()


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created) across processes; released on exit or process death."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _baseline(scenario: Scenario, toxi: Toxiproxy, opts: RunOptions) -> Baseline:
    """The fault-free run's record (final eval loss, floor, where), from the cache when the same config ran before.

    Runs that share a cache (parallel test workers, two CLI runs) compute each baseline once: the others wait on
    its lock, then read it.
    """
    key = scenario.cluster.config_hash()
    cached = opts.baseline_cache / key
    metrics_path = cached / "metrics.json"

    with _exclusive(opts.baseline_cache / f"{key}.lock"):
        if metrics_path.exists():
            m = RunMetrics.read(metrics_path)
            if m.final_eval_is_final:
                return baselines.record(m, cached, key, cached=True)
        if cached.exists():
            shutil.rmtree(cached)
        tmp = cached.with_name(key + ".partial")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        _Execution(scenario, tmp, toxi, [], opts, "baseline").execute()
        m = summarize_run(tmp)
        m.write(tmp / "metrics.json")
        if not m.final_eval_is_final:
            raise RunError(f"the baseline did not reach its token budget; see {tmp / 'logs'}")
        tmp.rename(cached)  # only a complete baseline enters the cache
        return baselines.record(m, cached, key, cached=False)


def _baselines(scenario: Scenario, toxi: Toxiproxy, opts: RunOptions) -> Baseline:
    """The fault-free runs over ``checks.parity.baseline_seeds`` cluster seeds, the run's own first (each cached),
    as a band (:func:`chaos.baselines.band`)."""
    n = scenario.checks.parity.baseline_seeds
    seed = scenario.cluster.seed
    runs = []
    for k in range(n):
        if opts.progress:
            opts.progress(f"baseline {k + 1}/{n}: fault-free run at cluster seed {seed + k}")
        one = scenario.model_copy(update={"cluster": scenario.cluster.fault_free_at(seed + k)})
        runs.append(_baseline(one, toxi, opts).model_copy(update={"seed": seed + k}))
    return baselines.band(runs, scenario.cluster.algorithm.num_fragments)


def _fault_free(
    scenario: Scenario, toxi: Toxiproxy, opts: RunOptions, out: Path
) -> tuple[Baseline | None, Baseline | None]:
    """The parity band's runs (none when parity is off) and, when the reference check is on, synchronous DiLoCo's;
    written into ``out``."""
    baseline = None
    if scenario.checks.needs_baseline:
        baseline = _baselines(scenario, toxi, opts)
        baseline.write(out / "baseline.json")
    reference = None
    if scenario.checks.reference.enabled:
        ref = scenario.cluster.fault_free_at(scenario.cluster.seed).sync_diloco_reference()
        reference = _baseline(scenario.model_copy(update={"cluster": ref}), toxi, opts)
        reference.write(out / "reference.json")
    return baseline, reference


def fault_free_runs(scenario: Scenario, opts: RunOptions) -> Baseline:
    """The scenario's fault-free runs (its parity band) into ``opts.baseline_cache``, or read from it: what
    :func:`run_scenario` would compute first. Its Toxiproxy log goes to ``opts.out_dir``."""
    Path(opts.out_dir).mkdir(parents=True, exist_ok=True)
    with _signals_interrupt(), toxiproxy_for(opts, Path(opts.out_dir) / "toxiproxy.log", scenario.seed) as toxi:
        return _baselines(scenario, toxi, opts)


def run_scenario(scenario: Scenario, opts: RunOptions) -> RunResult:
    """Baseline + chaos run + checks + reports. Raises RunError / Interrupted when the run cannot be done."""
    out = Path(opts.out_dir)
    if out.exists() and any(out.iterdir()):
        raise RunError(f"{out} is not empty; choose a new output directory")
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.json").write_text(scenario.model_dump_json(indent=2))
    planned = plan(scenario)
    try:
        with _signals_interrupt(), toxiproxy_for(opts, out / "logs" / "toxiproxy.log", scenario.seed) as toxi:
            baseline: Baseline | None = None
            reference: Baseline | None = None
            if opts.baseline and not opts.baseline_after:
                baseline, reference = _fault_free(scenario, toxi, opts, out)
            _Execution(scenario, out, toxi, planned, opts, "chaos").execute()
            if opts.baseline and opts.baseline_after:
                baseline, reference = _fault_free(scenario, toxi, opts, out)
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted; every fault was healed and every process stopped. Partial run: {out}"
        ) from None
    return analyse(scenario, out, baseline, reference)
