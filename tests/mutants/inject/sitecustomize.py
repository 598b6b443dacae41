"""The mutant suite's start-up hook for real processes (test machinery: see tests/mutants/real.py).

tests/mutants/real.py's ``in_children`` puts this directory on ``PYTHONPATH`` of the units a real run starts, so their
interpreters import this module at start-up. With ``DILOCO_TEST_MUTANT`` set it takes over ``runpy``'s start of a
``-m`` module (``tests.mutants.real.run_unit``: the syncer and learners run with the mutant in force); without it,
and for anything not started with ``-m``, it does nothing. It imports nothing until a ``-m`` module starts. A
``sitecustomize`` this one shadows on ``sys.path`` still runs.
"""

import os
import sys


def _install() -> None:
    import runpy

    original = runpy._run_module_as_main  # type: ignore[attr-defined]  # private: typeshed leaves it out

    def _run_module_as_main(mod_name, alter_argv=True):  # noqa: ANN001, ANN202 - runpy's private signature
        from tests.mutants.real import run_unit

        return run_unit(mod_name, alter_argv, original)

    runpy._run_module_as_main = _run_module_as_main  # type: ignore[attr-defined]  # as above


def _chain() -> None:
    """Run the ``sitecustomize`` further down ``sys.path`` that this one shadows, if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # imported by site at start-up (not as a test module)
    if os.environ.get("DILOCO_TEST_MUTANT"):
        _install()
    _chain()
