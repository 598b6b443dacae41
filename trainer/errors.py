"""The trainer's exception hierarchy: one base, messages that say what to do."""

from __future__ import annotations


class DilocoChaosError(Exception):
    """Root of every error this project raises on purpose (trainer, faults, chaos): the CLI prints its message and
    exits 2, never a traceback. Catch this to handle them all."""


class TrainerError(DilocoChaosError):
    """Base of every error the trainer raises on purpose."""


class ConfigError(TrainerError):
    """A configuration file or flag is invalid; the message names the file and field."""


class CheckpointError(TrainerError):
    """A checkpoint cannot be read or does not fit the configuration."""


class ProtocolError(TrainerError):
    """A peer sent something the protocol does not allow."""


class AddressInUse(TrainerError):
    """A server could not listen on the address it was given (another process holds the port)."""

    #: The syncer's exit code for it (sysexits' EX_TEMPFAIL: try again, e.g. on another port).
    EXIT_CODE = 75


class SyncerUnavailable(TrainerError):
    """The syncer could not be reached within the retry budget."""
