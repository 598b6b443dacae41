"""The mutant suite: planted, realistic trainer defects, and which checks catch each (issue 38, item 7).

A chaos harness is worth exactly as much as the bugs its checks catch. :mod:`tests.mutants.registry` holds the
mutants (each a monkeypatch of one core helper, applied in deterministic mode's single process);
:mod:`tests.mutants.runner` runs them on the built-in scenarios that reach them and records every check's verdict;
``.venv/bin/python -m tests.mutants`` prints the catch matrix and writes ``benchmarks/results/mutants.json``;
``.venv/bin/python -m tests.mutants.render`` puts it into docs/scenarios-and-checks.md; the per-change tier
(``tests/mutants/test_mutants*.py``) fails when a mutant survives that should not. Test machinery only: no module of
the installed packages imports this one.
"""
