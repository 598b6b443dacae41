"""``diloco-chaos``: run, list, validate and report chaos scenarios.

    diloco-chaos list
    diloco-chaos validate my-scenario.yaml [more.yaml ...]
    diloco-chaos run kill-and-rejoin [--out runs/chaos/k] [--seed 7] [--set cluster.token_budget=600000]
    diloco-chaos report runs/chaos/k
    diloco-chaos simulate kill-and-rejoin                  # deterministic mode, seconds
    diloco-chaos simulate --scale --chips 2.4M --compare   # goodput at scale, a simulated week
    diloco-chaos search kill-and-rejoin --examples 200 --out repro.yaml
    diloco-chaos replay repro.yaml --backend local         # or a run directory; --backend docker|sim
    diloco-chaos export k8s kill-and-rejoin --out k8s/k   # Kubernetes manifests + a Chaos Mesh Workflow
    diloco-chaos collect k8s k8s/k --out runs/k8s/k        # a cluster run as a run directory, for report

For CI: ``--junit PATH`` (run, replay, simulate, report) writes one JUnit test case per check; the report's
Markdown is appended to ``$GITHUB_STEP_SUMMARY`` when that is set; ``--json [PATH]`` (list, validate, run,
replay, simulate, report, export) prints the result as JSON (people's text then goes to stderr).

Exit codes (chaos.exit_codes): 0 every check passed; 1 a check failed;
2 the run could not be done: invalid scenario, a process would not start,
the run timed out, or it was interrupted (everything is healed and stopped),
or the reader of stdout went away (``| head``);
3 no check failed but one could not decide (the report says which and why).

Why one module: the subcommands' parsers and their thin handlers, the one place ``--help`` is written.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from chaos.errors import ChaosError, ScenarioError
from chaos.exit_codes import ExitCode
from chaos.json_output import add_json_argument, emit_json, json_mode
from trainer.errors import DilocoChaosError

if TYPE_CHECKING:
    from chaos.run_report import RunReport  # imported where used: the CLI starts fast

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = ExitCode.PASS, ExitCode.FAIL, ExitCode.ERROR


def _load(name_or_path: str, seed: int | None = None, sets: list[str] | None = None, preset: str = "tiny") -> Any:
    from chaos.scenario import load_scenario, parse_scenario, resolve
    from trainer import presets
    from trainer.config import merge_trees, parse_overrides
    from trainer.errors import ConfigError

    path = resolve(name_or_path)
    if seed is None and not sets and preset == "tiny":
        return load_scenario(path)
    load_scenario(path)  # validate the file as written first: its errors name its own fields
    tree = yaml.safe_load(path.read_text())
    try:
        extra = parse_overrides(sets or [])
        tree["cluster"] = presets.apply(tree.get("cluster") or {}, preset)
    except (ConfigError, ValueError) as err:
        raise ScenarioError(str(err)) from None
    tree = merge_trees(tree, extra)
    if seed is not None:
        tree["seed"] = seed
    return parse_scenario(tree, f"{path} (with --preset {preset}, --set, --seed)")


def cmd_list(args: argparse.Namespace) -> int:
    from chaos.scenario import builtin_scenarios, load_scenario

    rows = []
    for name, path in builtin_scenarios().items():
        s = load_scenario(path)
        rows.append({"name": name, "description": " ".join(s.description.split()), "path": str(path)})
        print(f"{name:22s} {rows[-1]['description']}")
    emit_json(args.json, rows)
    return EXIT_PASS


def cmd_export(args: argparse.Namespace) -> int:
    import dataclasses

    from chaos.k8s.export import export
    from chaos.k8s.manifests import ClusterOptions

    s = _load(args.scenario, args.seed, args.set, args.preset)
    if args.fault_free is not None:
        if not 0 <= args.fault_free < s.checks.parity.baseline_seeds:
            raise ChaosError(
                f"--fault-free {args.fault_free}: {s.name}'s parity band has runs 0 to "
                f"{s.checks.parity.baseline_seeds - 1} (checks.parity.baseline_seeds)"
            )
        s = s.fault_free(args.fault_free)
    token = Path(args.token_file).read_text().strip() if args.token_file else None
    opts = ClusterOptions(namespace=args.namespace, image=args.image)
    if args.cpu:
        opts = dataclasses.replace(opts, cpu=args.cpu)
    if args.memory:
        opts = dataclasses.replace(opts, memory=args.memory)
    if args.kubectl_image:
        opts = dataclasses.replace(opts, kubectl_image=args.kubectl_image)
    if args.netfault_image:
        opts = dataclasses.replace(opts, netfault_image=args.netfault_image)
    done = export(s, Path(args.out), opts, token)
    print(
        f"{s.name}: {done.objects} objects written to {args.out}\n"
        f"  kubectl apply -f {done.cluster}\n"
        f"  kubectl apply -f {done.workflow}   # once training is steady (docs/kubernetes.md)"
    )
    emit_json(
        args.json,
        {
            "scenario": s.name,
            "cluster": str(done.cluster),
            "workflow": str(done.workflow),
            "scenario_file": str(done.scenario),
            "objects": done.objects,
        },
    )
    return EXIT_PASS


def cmd_collect(args: argparse.Namespace) -> int:
    from chaos.k8s.gather import gather, unsettled

    s = gather(Path(args.export_dir), Path(args.out), args.namespace, args.kubectl)
    print(f"{s.name}: gathered into {args.out}; judge it with: diloco-chaos report {args.out}")
    why = unsettled(Path(args.out))
    if why:
        print(f"warning: {why}", file=sys.stderr)
    return EXIT_PASS


def cmd_validate(args: argparse.Namespace) -> int:
    from chaos.fault_plan import plan

    code = EXIT_PASS
    rows: list[dict[str, Any]] = []
    for item in args.scenarios:
        try:
            s = _load(item)
        except ScenarioError as err:
            print(err, file=sys.stderr)
            rows.append({"scenario": item, "ok": False, "error": str(err)})
            code = EXIT_ERROR
            continue
        faults = plan(s)
        checks = [n for n, c in s.checks if c.enabled]
        rows.append(
            {
                "scenario": item,
                "ok": True,
                "name": s.name,
                "learners": s.cluster.algorithm.num_learners,
                "faults": len(faults),
                "checks": checks,
            }
        )
        print(
            f"{item}: ok — {s.cluster.algorithm.num_learners} learners, {len(faults)} fault(s), "
            f"checks: {', '.join(checks)}"
        )
    emit_json(args.json, rows)
    return code


def _publish(report: RunReport, args: argparse.Namespace) -> None:
    """What a finished run gives its reader: verdict lines, and for CI the JUnit file, the job summary, JSON."""
    from chaos.ci_output import append_step_summary, write_junit

    _print_verdicts(report)
    if getattr(args, "junit", None):
        print(f"junit: {write_junit(report, args.junit)}")
    if summary := append_step_summary(report):
        print(f"job summary: appended to {summary}")
    emit_json(getattr(args, "json", None), report.model_dump(mode="json"))


def _print_verdicts(report: RunReport) -> None:
    for v in report.verdicts:
        print(f"  {v.status.upper():13s} {v.name:14s} {v.summary}")
    for w in report.warnings:
        print(f"  warning: {w}")
    where = f"{report.run_dir}/report.md"
    host = os.environ.get("DILOCO_HOST_RUNS_DIR")  # inside compose: where the host sees DILOCO_RUNS_DIR
    if host and os.environ.get("DILOCO_RUNS_DIR") and where.startswith(os.environ["DILOCO_RUNS_DIR"]):
        where = host + where[len(os.environ["DILOCO_RUNS_DIR"]) :]
    print(f"{report.status.upper()}: {where}")


def _default_out(root_env: str, default_root: str, name: str) -> Path:
    root = os.environ.get(root_env, default_root)
    return Path(f"{root}/{name}-{time.strftime('%Y%m%d-%H%M%S')}")


def _simulate(s: Any, args: argparse.Namespace) -> int:
    from chaos.sim import simulate

    out = Path(args.out) if args.out else _default_out("DILOCO_RUNS_DIR", "runs/sim", s.name)
    if out.exists() and any(out.iterdir()):
        raise ChaosError(f"{out} is not empty; choose a new output directory")
    result = simulate(s)
    report = result.write(out).report
    _publish(report, args)
    if result.timed_out:
        print(
            f"error: the simulated run did not finish within timeout_s = {s.timeout_s}s (virtual)", file=sys.stderr
        )
    return result.exit_code


def _execute(s: Any, args: argparse.Namespace) -> int:
    """Run a validated scenario on the chosen backend (shared by run and replay)."""
    from chaos.controller import RunOptions, run_scenario
    from chaos.fault_plan import plan
    from faults.kinds import CONTAINER_KINDS

    if args.backend == "sim":
        return _simulate(s, args)
    out = Path(args.out) if args.out else _default_out("DILOCO_RUNS_DIR", "runs/chaos", s.name)
    opts = RunOptions(
        out,
        toxiproxy_url=args.toxiproxy_url,
        baseline=not args.no_baseline,
        progress=None if args.quiet else lambda m: print(m, flush=True),
        metrics_port=None if args.no_metrics else args.metrics_port,
        metrics_host=args.metrics_host,
    )
    cache = args.baseline_cache or os.environ.get("DILOCO_BASELINE_CACHE")
    if cache:
        opts.baseline_cache = Path(cache)
    kinds = {p.kind for p in plan(s)}
    if args.backend in ("local", "namespaces") and kinds & CONTAINER_KINDS:
        raise ScenarioError(
            f"{s.name}: faults {sorted(kinds & CONTAINER_KINDS)} need containers; run it with --backend docker"
        )
    if args.backend == "namespaces":
        from chaos.backends.local import NamespacedLocalBackend

        if os.geteuid() != 0:
            raise ScenarioError("--backend namespaces creates network namespaces: run it as root (CAP_NET_ADMIN)")
        opts.backend = NamespacedLocalBackend
    if args.backend == "docker":
        from chaos.backends.docker import Deployment, DockerDeployment, docker_backend_factory

        dep = Deployment.from_env()
        deployment = DockerDeployment(Deployment(args.project, dep.in_network) if args.project else dep)
        opts.backend = docker_backend_factory(deployment)
        opts.toxiproxy_url = opts.toxiproxy_url or deployment.toxiproxy_url()
    try:
        result = run_scenario(s, opts)
    finally:
        if args.backend == "docker" and args.stop_deployment:
            deployment.stop_others()
    _publish(result.report, args)
    return result.exit_code


def cmd_run(args: argparse.Namespace) -> int:
    if args.sut == "torchft":
        return _run_torchft(args)
    return _execute(_load(args.scenario, args.seed, args.set, args.preset), args)


def _run_torchft(args: argparse.Namespace) -> int:
    """The scenario against torchft instead of our trainer (peers/torchft: docs/testing-your-trainer.md), in a source
    checkout with the ``torchft`` extra installed; only the scenario (a built-in's name) and --out carry over."""
    import importlib.util
    import subprocess

    root = Path(__file__).resolve().parent.parent
    if not (root / "peers" / "torchft" / "run.py").exists():
        raise ScenarioError("--sut torchft runs peers/torchft from a source checkout: run it from a clone")
    if importlib.util.find_spec("torchft") is None:
        raise ScenarioError("--sut torchft needs torchft and torch: pip install -e '.[torchft]' (~5.4 GB)")
    if args.set or args.preset or args.seed is not None:
        raise ScenarioError("--sut torchft takes the built-in scenario as it is: no --set, --preset or --seed")
    cmd = [sys.executable, "-m", "peers.torchft.run", args.scenario]
    if args.out:
        cmd += ["--out", str(args.out)]
    return subprocess.run(cmd, cwd=root).returncode


def cmd_replay(args: argparse.Namespace) -> int:
    from chaos.replay import replay_scenario

    s = replay_scenario(args.target)
    print(f"replaying {s.name}: {len(s.schedule)} fault(s) on --backend {args.backend}", flush=True)
    return _execute(s, args)


def cmd_simulate(args: argparse.Namespace) -> int:
    from chaos.scale.command import run_scale_command, scale_only_flags

    if args.scale:
        return run_scale_command(args)
    if flags := scale_only_flags(args):
        raise ScenarioError(f"{', '.join(flags)} belong to the scale simulator: add --scale")
    if not args.scenario:
        raise ScenarioError(
            "simulate needs a SCENARIO (a built-in name or a file), or --scale for the scale simulator"
        )
    return _simulate(_load(args.scenario, args.seed, args.set, args.preset), args)


def cmd_search(args: argparse.Namespace) -> int:
    from chaos.search import DEFAULT_CHECKS, find_failure
    from chaos.strategies import FaultSchedule, fault_schedules
    from faults.kinds import LOCAL_KINDS

    s = _load(args.template, None, args.set)
    kinds = tuple(args.kinds.split(",")) if args.kinds else LOCAL_KINDS
    unknown = sorted(set(kinds) - set(LOCAL_KINDS))
    if unknown:
        raise ScenarioError(
            f"--kinds: {unknown} cannot run on local processes, where a repro must replay; "
            f"choose from {', '.join(LOCAL_KINDS)}"
        )
    checks = tuple(args.checks.split(",")) if args.checks else DEFAULT_CHECKS
    a = s.cluster.algorithm
    strategy = fault_schedules(
        learners=a.num_learners,
        kinds=kinds,
        max_faults=args.max_faults,
        max_down=args.max_down,
        min_quorum=a.min_quorum,
    )
    print(
        f"searching {args.examples} schedules of up to {args.max_faults} fault(s) ({', '.join(kinds)}) "
        f"for a failure of {', '.join(checks)}; seed {args.seed}",
        flush=True,
    )
    simulated: list[FaultSchedule] = []
    found = find_failure(
        s,
        schedules=strategy,
        checks=checks,
        max_examples=args.examples,
        seed=args.seed,
        on_example=lambda schedule, _: simulated.append(schedule),
    )
    if found is None:
        print(f"no failing schedule in {len(simulated)} simulated schedule(s)")
        return EXIT_PASS
    out = Path(args.out or f"{s.name}-repro.yaml")
    found.write(out)
    print(f"FAIL after shrinking: {found.schedule.describe()} (outer steps)")
    for v in found.result.failed(*checks):
        print(f"  FAIL          {v.name:14s} {v.summary}")
    print(f"written: {out}  (replay: diloco-chaos replay {out} --backend local)")
    return EXIT_FAIL


def cmd_report(args: argparse.Namespace) -> int:
    from chaos.analysis import analyse
    from chaos.run_report import Baseline
    from chaos.scenario import parse_scenario

    run_dir = Path(args.run_dir)
    spath = run_dir / "scenario.json"
    if not spath.exists():
        raise ChaosError(f"{run_dir}: no scenario.json; is this a diloco-chaos run directory?")
    scenario = parse_scenario(json.loads(spath.read_text()), str(spath))
    bpath, rpath = run_dir / "baseline.json", run_dir / "reference.json"
    if args.baseline:  # fault-free runs made elsewhere (on Kubernetes): they become the run's parity band
        from chaos.baselines import from_run_dirs

        from_run_dirs(scenario, [Path(b) for b in args.baseline]).write(bpath)
    baseline = Baseline.read(bpath) if bpath.exists() else None
    reference = Baseline.read(rpath) if rpath.exists() else None
    result = analyse(scenario, run_dir, baseline, reference)
    _publish(result.report, args)
    return result.exit_code


def _quantity(text: str) -> str:
    from chaos.k8s.manifests import quantity

    try:
        return quantity(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_overrides(p: argparse.ArgumentParser) -> None:
    from trainer.presets import PRESETS, default_preset

    p.add_argument("--seed", type=int, help="override the scenario's schedule seed")
    p.add_argument(
        "--preset",
        default=default_preset(),
        choices=list(PRESETS),
        help="the system under test's size (trainer/presets.py): "
        + "; ".join(f"{p.name}: {p.what}" for p in PRESETS.values())
        + " (default $DILOCO_PRESET or tiny; --set wins over it)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. cluster.algorithm.min_quorum=3 (repeatable)",
    )


def _add_outputs(p: argparse.ArgumentParser, junit: bool = True) -> None:
    """--json (and --junit) of a command; simulate's --json comes with the scale simulator's flags."""
    add_json_argument(p)
    if junit:
        p.add_argument("--junit", metavar="PATH", help="write the checks as JUnit XML (one test case per check)")


def _add_run_options(r: argparse.ArgumentParser) -> None:
    _add_outputs(r)
    r.add_argument("--out", help="run directory (default runs/chaos/<name>-<time>)")
    r.add_argument("--toxiproxy-url", help="use this Toxiproxy server instead of starting one")
    r.add_argument("--no-baseline", action="store_true", help="skip the fault-free run (parity: indeterminate)")
    r.add_argument("--baseline-cache", help="where baselines are cached (default .cache/diloco-chaos/baselines)")
    r.add_argument("--quiet", action="store_true", help="no live progress")
    r.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve the controller's Prometheus /metrics (active faults) here while a run executes "
        "(default 0: a free port; RUN_DIR/metrics/controller.json names it)",
    )
    r.add_argument("--metrics-host", default="127.0.0.1", help="address the controller's /metrics listens on")
    r.add_argument("--no-metrics", action="store_true", help="the controller serves no /metrics")
    r.add_argument(
        "--backend",
        choices=["local", "namespaces", "docker", "sim"],
        default="local",
        help="local processes (default), local processes each learner in a network namespace of its own "
        "(network faults on its interface, not a proxy; root), the docker compose deployment's containers, or "
        "deterministic mode",
    )
    r.add_argument(
        "--stop-deployment",
        action="store_true",
        help="docker backend: stop every other container of the deployment afterwards "
        "(the compose controller does, so `docker compose up` returns)",
    )
    r.add_argument(
        "--project", help="compose project of the docker backend (default $DILOCO_COMPOSE_PROJECT or diloco-chaos)"
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="diloco-chaos",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[2:]),
    )
    ap.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = ap.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the built-in scenarios")
    _add_outputs(ls, junit=False)
    ls.set_defaults(fn=cmd_list)
    v = sub.add_parser("validate", help="validate scenario files without running anything")
    v.add_argument("scenarios", nargs="+", metavar="SCENARIO")
    _add_outputs(v, junit=False)
    v.set_defaults(fn=cmd_validate)
    r = sub.add_parser("run", help="run a scenario: baseline (cached), chaos run, checks, report")
    r.add_argument("scenario", metavar="SCENARIO", help="a built-in name (see list) or a scenario file")
    _add_overrides(r)
    _add_run_options(r)
    r.add_argument(
        "--sut",
        choices=["ours", "torchft"],
        default="ours",
        help="the system under test: our trainer (default), or torchft's DiLoCo (the torchft extra, a source "
        "checkout, root: docs/testing-your-trainer.md)",
    )
    r.set_defaults(fn=cmd_run)
    rp = sub.add_parser("replay", help="run again a run directory's recorded plan, or a scenario file from search")
    rp.add_argument("target", metavar="RUN_DIR_OR_FILE")
    _add_run_options(rp)
    rp.set_defaults(fn=cmd_replay)
    sm = sub.add_parser(
        "simulate",
        help="run a scenario in deterministic mode (virtual clock, seconds), or with "
        "--scale simulate goodput at data-centre scale",
    )
    sm.add_argument(
        "scenario",
        metavar="SCENARIO",
        nargs="?",
        help="a scenario (built-in name or file); with --scale, an optional plan file",
    )
    _add_overrides(sm)
    sm.add_argument("--out", help="run directory (default runs/sim/<name>-<time>)")
    sm.add_argument("--junit", metavar="PATH", help="write the checks as JUnit XML (one test case per check)")
    from chaos.scale.command import add_scale_arguments

    add_scale_arguments(sm)
    sm.set_defaults(fn=cmd_simulate)
    se = sub.add_parser(
        "search",
        help="generate fault schedules in deterministic mode, shrink the first failing "
        "one, write it as a scenario",
    )
    se.add_argument("template", metavar="SCENARIO", help="cluster and checks to use (its own schedule is ignored)")
    se.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario field")
    se.add_argument("--examples", type=int, default=200, help="schedules to try before giving up (default 200)")
    se.add_argument("--seed", type=int, default=0, help="seed of the generated schedules (default 0)")
    se.add_argument("--max-faults", type=int, default=4)
    se.add_argument(
        "--max-down",
        type=int,
        default=None,
        help="most learners out at once (default M - K: admissible schedules only)",
    )
    se.add_argument("--kinds", help="comma-separated fault kinds (default: every kind a local run supports)")
    se.add_argument(
        "--checks", help="comma-separated checks that must hold (default liveness,reintegration,durability,safety)"
    )
    se.add_argument("--out", help="where to write the shrunk scenario (default <name>-repro.yaml)")
    se.set_defaults(fn=cmd_search)
    ex = sub.add_parser("export", help="write a scenario as Kubernetes manifests and a Chaos Mesh Workflow")
    ex.add_argument("target", choices=["k8s"], help="what to export to (k8s: Kubernetes + Chaos Mesh)")
    ex.add_argument("scenario", metavar="SCENARIO", help="a built-in name (see list) or a scenario file")
    _add_overrides(ex)
    ex.add_argument("--out", required=True, help="directory for cluster.yaml, workflow.yaml and scenario.json")
    ex.add_argument("--namespace", default="diloco-chaos", help="namespace of every object (default diloco-chaos)")
    ex.add_argument("--image", default="diloco-chaos:latest", help="the project's image, as the cluster pulls it")
    ex.add_argument("--token-file", help="the run's shared token (default: a new random one)")
    ex.add_argument(
        "--cpu",
        type=_quantity,
        help="CPU each pod requests (default 1: the tiny model trains on one core; the syncer and M learners must fit "
        "the nodes, e.g. 250m on one 2-core node)",
    )
    ex.add_argument("--memory", type=_quantity, help="memory each pod requests (default 2Gi)")
    ex.add_argument(
        "--kubectl-image",
        help="image of the Workflow's exec steps (pause, slow, corrupt, reset_peer, "
        "data_limit; default registry.k8s.io/kubectl, the version of the checked "
        "API types)",
    )
    ex.add_argument(
        "--netfault-image",
        help="image of the learners' netfault sidecar, for reset_peer and data_limit "
        "(needs sh, ss and iptables; default nicolaka/netshoot)",
    )
    ex.add_argument(
        "--fault-free",
        type=int,
        metavar="K",
        help="export run K of the scenario's parity band instead (its cluster at seed + K, no faults; "
        "`report RUN --baseline` takes them, in order)",
    )
    _add_outputs(ex, junit=False)
    ex.set_defaults(fn=cmd_export)
    co = sub.add_parser(
        "collect",
        help="gather a Kubernetes run (events, Chaos Mesh's fault records) into a run directory for `report`",
    )
    co.add_argument("target", choices=["k8s"])
    co.add_argument(
        "export_dir", metavar="EXPORT_DIR", help="the directory `export k8s` wrote (its scenario.json)"
    )
    co.add_argument("--out", required=True, help="the run directory to write (new or empty)")
    co.add_argument("--namespace", default="diloco-chaos")
    co.add_argument("--kubectl", default="kubectl", help="the kubectl to run (default: the one on PATH)")
    co.set_defaults(fn=cmd_collect)
    rep = sub.add_parser("report", help="re-run the checks and rewrite the reports of a run directory")
    rep.add_argument("run_dir", metavar="RUN_DIR")
    rep.add_argument(
        "--baseline",
        action="append",
        metavar="DIR",
        help="a fault-free run of the band made elsewhere (export k8s --fault-free K, then collect k8s), once per "
        "run in order; written as RUN_DIR/baseline.json",
    )
    _add_outputs(rep)
    rep.set_defaults(fn=cmd_report)
    return ap


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("diloco-chaos")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C must always reach the controller's cleanup, even when the shell that started us
    # set SIGINT to "ignore" (background jobs of non-interactive shells do: found by the interrupt test).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with json_mode(getattr(args, "json", None)):
            return args.fn(args)
    except DilocoChaosError as err:  # the trainer's, the faults' and the harness's: a message, never a traceback
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader of stdout left (`| head`): no traceback. Point stdout at /dev/null so that the interpreter's
        # own flush at exit does not fail again (the Python docs' recipe, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
