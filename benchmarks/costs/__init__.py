"""What the harness costs and how it holds up: a fault's time to its effect (``fault_latency``), the learner's
overhead of background syncing (``learner_overhead``), a search's time (``search_phases``), verdicts under CPU load
(``under_load``) and the test tiers' times (``tier_times``). docs/benchmarks.md, docs/ci-tiers.md."""
