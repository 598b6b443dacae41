"""The faults package's exception hierarchy: one base, messages that say what to do."""

from __future__ import annotations

from trainer.errors import DilocoChaosError


class FaultError(DilocoChaosError):
    """Base of every error a fault injector raises on purpose."""


class TargetError(FaultError):
    """A fault names a unit or link the cluster does not have."""


class ToxiproxyError(FaultError):
    """The Toxiproxy control API refused a call, answered garbage, or did not answer in time."""


class ToxiproxyNotInstalled(ToxiproxyError):
    """No toxiproxy-server binary was found; the message says how to install one."""
