"""Per-learner credentials derived from the run's shared secret: holding one learner's cannot act as another.

The operator (the chaos controller, launchers, tests) holds the shared secret.
Each learner process is given only its own credential,

    learner:<id>:<HMAC-SHA256(secret, "learner:" + id) in hex>

which the syncer checks without a table (it recomputes the HMAC) and which
names the only learner id its holder may join, report, upload or leave as. A
rejoin of the same id (a restarted process, a new incarnation) presents the
same credential, so kill and restart keep working.

Example:
    >>> c = learner_credential("s3cret", "learner-1")
    >>> c.startswith("learner:learner-1:"), caller("s3cret", c), caller("s3cret", "s3cret")
    (True, Caller(learner_id='learner-1'), Caller(learner_id=None))
    >>> caller("s3cret", c.replace("learner-1", "learner-2")) is None    # a credential names one id
    True
    >>> caller("s3cret", c).may_act_as("learner-2"), caller("s3cret", "s3cret").may_act_as("learner-2")
    (False, True)
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

PREFIX = "learner:"


@dataclass(frozen=True)
class Caller:
    """Who presented a valid credential: a learner (its id), or the operator (``None``: any id)."""

    learner_id: str | None

    def may_act_as(self, learner_id: str) -> bool:
        return self.learner_id is None or self.learner_id == learner_id


def _mac(secret: str, learner_id: str) -> str:
    return hmac.new(secret.encode(), (PREFIX + learner_id).encode(), hashlib.sha256).hexdigest()


def presented(metadata) -> str | None:  # noqa: ANN001
    """The credential in a call's ``authorization: Bearer <credential>`` metadata (None: no such header; "": a
    header of another form, which no credential matches).

    >>> presented((("authorization", "Bearer abc"),)), presented(()), presented((("authorization", "abc"),))
    ('abc', None, '')
    """
    got = dict(metadata or ()).get("authorization")
    if got is None:
        return None
    return got[len("Bearer ") :] if isinstance(got, str) and got.startswith("Bearer ") else ""


def checkpoint_key(secret: str) -> bytes:
    """The key of the syncer's checkpoint digests (trainer.checkpoint): one who can write the run directory but
    does not hold the secret cannot forge a checkpoint the syncer restores. Derived apart from the credentials."""
    return hmac.new(secret.encode(), b"diloco-chaos checkpoint", hashlib.sha256).digest()


def learner_credential(secret: str, learner_id: str) -> str:
    """The credential a launcher gives the process of ``learner_id`` instead of the shared secret."""
    return f"{PREFIX}{learner_id}:{_mac(secret, learner_id)}"


def caller(secret: str, presented: str) -> Caller | None:
    """Who ``presented`` proves to be, or None for no valid credential (compared in constant time)."""
    if hmac.compare_digest(presented.encode(), secret.encode()):
        return Caller(None)
    if presented.startswith(PREFIX) and presented.count(":") >= 2:
        learner_id, mac = presented[len(PREFIX) :].rsplit(":", 1)
        if learner_id and hmac.compare_digest(mac.encode(), _mac(secret, learner_id).encode()):
            return Caller(learner_id)
    return None
