"""The paper's claims, measured: model quality against synchronous DiLoCo (``reference_parity``), slow links
(``slow_links``), goodput under failures (``goodput``), heterogeneous learners (``heterogeneous``) on real clusters,
and at data-centre scale through the simulator (``scale_paper_table``, ``scale_bandwidth``, with
``scale_sim_to_real`` checking the simulator against the real goodput runs). docs/benchmarks.md,
docs/scale-simulator.md."""
