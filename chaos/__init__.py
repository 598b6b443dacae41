"""The chaos controller: declarative scenarios, seeded schedules, a recorded history, checkers, reports.

Jepsen's split, kept apart in modules: :mod:`chaos.scenario` (what to run),
:mod:`chaos.fault_plan` (the generator: when which fault hits whom),
:mod:`faults` (the nemesis), :mod:`chaos.history` (what happened),
:mod:`chaos.checkers` (verdicts over the history), :mod:`chaos.controller`
(the lifecycle that ties them together and always heals).
"""
