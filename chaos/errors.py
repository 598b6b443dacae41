"""The chaos package's exception hierarchy: one base, messages that say what to do."""

from __future__ import annotations

from trainer.errors import DilocoChaosError


class ChaosError(DilocoChaosError):
    """Base of every error the chaos controller raises on purpose."""


class ScenarioError(ChaosError):
    """A scenario file is invalid; the message names the file and each bad field."""


class RunError(ChaosError):
    """A run could not be carried out (a process would not start, the run timed out): exit code 2."""
