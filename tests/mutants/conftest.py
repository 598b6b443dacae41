"""tests/mutants/inject/ holds the real-process hook (a ``sitecustomize``), not tests: no collection there (the
nightly's ``--doctest-modules`` would import it as a module)."""

collect_ignore = ["inject"]
