"""Fault injectors: typed faults with idempotent inject and heal.

Network faults act through Toxiproxy (every learner's link to the syncer is
its own proxy); process faults act through signals on a cluster backend.
Each fault only needs the small :class:`faults.base.Cluster` protocol, so the
same faults drive local processes and containers.
"""
