"""Systems under test that are not ours, and what puts them under the harness (docs/testing-your-trainer.md).

Nothing under trainer/, chaos/ or faults/ imports these: each runs in its own environment (its own extra and tier).
"""
