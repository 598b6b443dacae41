"""Mutants in real processes: the syncer and learners a real run starts, each with one mutant in force.

The local backend starts every unit as ``python -m trainer.syncer`` / ``python -m trainer.learner`` with this
process's environment (``trainer.launch.LocalCluster._env`` copies ``os.environ`` and puts the repository first on
``PYTHONPATH``). :func:`in_children` sets, in this process's environment and only while it is entered:

``DILOCO_TEST_MUTANT=<name>``
    the mutant (a registry name whose modes include ``real``);
``DILOCO_TEST_MUTANT_LOG=<path>``
    where the children record what they did (JSON lines, :func:`records`);
``PYTHONPATH``
    ``tests/mutants/inject`` added, whose ``sitecustomize.py`` every child's interpreter imports at start-up.

That hook (test machinery only: nothing under ``trainer/``, ``chaos/`` or ``faults/`` imports ``tests`` or reads these
variables, tests/mutants/test_mutants.py checks it) takes over ``runpy``'s start of a ``-m`` module: for a unit
(:data:`UNITS`) :func:`run_unit` imports it as a module, applies the mutant's patches there (where the unit's code
looks its names up) for the process's lifetime, records ``applied`` and, on the first call of each replacement,
``called``, then runs the unit's ``main()`` as ``-m`` would. Any other program, and every process started without the
variable, runs untouched. Cleanup is the backend's as for any run: the children die with the run.

Example (the records a child writes):
    >>> import tempfile, json
    >>> log = Path(tempfile.mkdtemp()) / "mutant.jsonl"
    >>> _record(log, "applied", mutant="shell_data_replayed", unit="trainer.learner")
    >>> [(r["event"], r["unit"]) for r in records(log)]
    [('applied', 'trainer.learner')]
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ENV_MUTANT = "DILOCO_TEST_MUTANT"
ENV_LOG = "DILOCO_TEST_MUTANT_LOG"
INJECT_DIR = Path(__file__).resolve().parent / "inject"  # holds sitecustomize.py, the hook
UNITS = ("trainer.syncer", "trainer.learner")  # the -m modules the local backend starts (trainer.launch)
REFUSED_EXIT = 3  # a child asked for a mutant that does not apply to real processes


def child_env(name: str, log: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) with the mutant, its log and the hook's directory on ``PYTHONPATH``.

    >>> env = child_env("shell_data_replayed", Path("/tmp/m.jsonl"), {"PYTHONPATH": "/x"})
    >>> env[ENV_MUTANT], env["PYTHONPATH"] == f"{INJECT_DIR}{os.pathsep}/x"
    ('shell_data_replayed', True)
    """
    env = dict(os.environ if environ is None else environ)
    env[ENV_MUTANT], env[ENV_LOG] = name, str(log)
    env["PYTHONPATH"] = str(INJECT_DIR) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@contextlib.contextmanager
def in_children(name: str, log: Path) -> Iterator[None]:
    """Every unit this process starts while entered runs mutant ``name`` (recording into ``log``); the environment
    is restored exactly on exit, whatever happened."""
    from tests.mutants.registry import MUTANTS_BY_NAME

    if "real" not in MUTANTS_BY_NAME[name].modes:
        raise ValueError(f"mutant {name} does not apply to real processes (modes {MUTANTS_BY_NAME[name].modes})")
    keys = (ENV_MUTANT, ENV_LOG, "PYTHONPATH")
    saved = {k: os.environ.get(k) for k in keys}
    env = child_env(name, log)
    try:
        for k in keys:
            os.environ[k] = env[k]
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def records(log: Path) -> list[dict[str, Any]]:
    """What the children recorded (none when the file is missing); a line cut short by a killed process is
    skipped."""
    out = []
    try:
        lines = Path(log).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _record(log: Path | str | None, event: str, **fields: Any) -> None:
    if not log:
        return
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n"
    with open(log, "a") as f:  # O_APPEND: the children's short lines do not interleave
        f.write(line)


def _unit_name(mod_name: str, argv: list[str]) -> str:
    """The unit a child runs as: a learner's ``--id`` (``learner`` without one), or ``syncer``.

    >>> _unit_name("trainer.learner", ["x", "--id", "learner-2"]), _unit_name("trainer.syncer", ["x", "--port", "0"])
    ('learner-2', 'syncer')
    """
    if mod_name == "trainer.syncer":
        return "syncer"
    return argv[argv.index("--id") + 1] if "--id" in argv[:-1] else "learner"


def run_unit(mod_name: str, alter_argv: bool, original: Callable[[str, bool], Any]) -> Any:
    """``runpy._run_module_as_main`` in a child started with :data:`ENV_MUTANT` set (the hook calls this)."""
    name, log = os.environ.get(ENV_MUTANT, ""), os.environ.get(ENV_LOG, "")
    if not name or mod_name not in UNITS:
        return original(mod_name, alter_argv)
    from tests.mutants.registry import MUTANTS_BY_NAME

    m = MUTANTS_BY_NAME.get(name)
    if m is None or "real" not in m.modes:
        _record(
            log,
            "refused",
            mutant=name,
            unit=mod_name,
            why="unknown mutant" if m is None else f"modes {list(m.modes)}: not for real processes",
        )
        print(f"tests/mutants hook: mutant {name!r} does not apply to real processes", file=sys.stderr)
        raise SystemExit(REFUSED_EXIT)
    module = importlib.import_module(mod_name)  # as a module (not __main__): the patches land where main() looks
    if alter_argv:
        sys.argv[0] = module.__file__ or sys.argv[0]
    unit = _unit_name(mod_name, sys.argv)
    seen: set[str] = set()

    def called(target: str) -> None:
        if target not in seen:
            seen.add(target)
            _record(log, "called", mutant=name, unit=unit, target=target)

    with m.patched(observe=called):
        _record(
            log,
            "applied",
            mutant=name,
            unit=unit,
            module=mod_name,
            patched={p.target: _qualname(p) for p in m.patches},
        )
        sys.exit(module.main())


def _qualname(patch: Any) -> str:
    """What the patched attribute is now (the replacement's qualified name): the record proves the patch took."""
    owner, name = patch._owner()
    value = getattr(owner, name)
    return getattr(getattr(value, "__func__", value), "__qualname__", type(value).__name__)
