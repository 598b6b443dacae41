"""Connection faults Chaos Mesh has no experiment for, from a sidecar in each learner pod: reset and byte limits.

Toxiproxy's ``reset_peer`` and ``limit_data`` act on TCP connections; Chaos Mesh's NetworkChaos only drops, delays
or shapes packets. So when a scenario has ``reset_peer`` or ``data_limit``, the export gives each learner pod a
``netfault`` container (a network-tools image, ``NET_ADMIN`` and ``NET_RAW``, root in that container only), which
shares the pod's network namespace with the learner, and the Workflow's exec steps run these commands in it:

- ``reset_peer``: every connection to the syncer's port is destroyed with ``ss -K`` (the kernel aborts the
  learner's socket and sends the syncer a reset: ``ECONNABORTED`` / ``ECONNRESET``, as a Toxiproxy reset gives),
  again every ``max(timeout_ms, 100 ms)`` until the heal, so reconnections are reset too. The inject step starts
  that loop in the background and returns; the heal step stops it and waits one interval, so no reset follows the
  heal. The loop also ends by itself a minute after the fault's planned end (a Workflow deleted mid-fault).
- ``data_limit``: an ``iptables`` rule rejects with a TCP reset every packet of a connection to the syncer once
  the connection has carried ``bytes`` in the fault's direction (the ``connbytes`` match); the heal deletes it.
  connbytes counts IP packet bytes, headers included, where Toxiproxy counts payload: the cut comes earlier by
  the headers' share (100-byte writes carry 52 header bytes each: a 1000-byte limit let 500 payload bytes through
  on loopback here). And the count is conntrack's: a reconnection that happens to
  reuse the reset connection's source port while conntrack still holds it (its close timeout, 10 s) would start
  over the limit and be reset at once. A reply may cross the limit before the learner's connect() returns.

Each command is a shell script (``sh -c``) returned as (inject, heal); both are idempotent (a retried step
changes nothing). Both kinds target learners only (faults.kinds: not ``on_syncer``), so the sidecar is in learner
pods only. Pure: the strings here are what ``tests/integration/test_netfault.py`` runs for real against a loopback
connection.

    >>> data_limit_rule(50051, 64000, "to_syncer")[:4]
    ['OUTPUT', '-p', 'tcp', '--dport']
    >>> inject, heal = reset_peer_commands("r1", 50051, timeout_ms=0, seconds=5)
    >>> "ss -K dport = :50051" in inject, heal
    (True, 'rm -f /tmp/diloco-reset-r1; sleep 0.1')
"""

from __future__ import annotations

import math
import shlex

from chaos.k8s.objects import Body

NETFAULT_CONTAINER = "netfault"
NETFAULT_KINDS = frozenset({"reset_peer", "data_limit"})  # run in the netfault sidecar
DEFAULT_IMAGE = "nicolaka/netshoot:v0.13"  # ss (iproute2), iptables and a shell; any image with them will do
MIN_RESET_INTERVAL_S = 0.1  # reset_peer with timeout 0: Toxiproxy resets at the first byte; we poll this often
SELF_HEAL_AFTER_S = 60  # a reset loop whose heal never came stops this long after the fault's planned end

# connbytes' direction words, seen from the learner: its bytes to the syncer, the syncer's replies, or both.
CONNBYTES_DIR = {"to_syncer": "original", "from_syncer": "reply", "both": "both"}


def reset_peer_commands(name: str, port: int, timeout_ms: int, seconds: float) -> tuple[str, str]:
    """(inject, heal): start the loop that destroys every connection to ``port`` every ``max(timeout, 100 ms)``
    while its flag file exists; remove the flag and wait out one interval."""
    interval = f"{max(timeout_ms / 1000.0, MIN_RESET_INTERVAL_S):g}"
    flag = shlex.quote(f"/tmp/diloco-reset-{name}")
    limit = math.ceil(seconds) + SELF_HEAL_AFTER_S
    loop = (
        f"end=$(( $(date +%s) + {limit} )); "
        f'while [ -e {flag} ] && [ "$(date +%s)" -lt "$end" ]; do '
        f"ss -K dport = :{port} >/dev/null 2>&1; sleep {interval}; done; rm -f {flag}"
    )
    inject = f"[ -e {flag} ] && exit 0; touch {flag}; ( {loop} ) >/dev/null 2>&1 &"
    return inject, f"rm -f {flag}; sleep {interval}"


def data_limit_rule(port: int, nbytes: int, direction: str) -> list[str]:
    """The iptables rule (chain first; insert with ``-I``, delete with ``-D``) that resets a connection to ``port``
    once it has carried ``nbytes`` in ``direction``. In OUTPUT either way: the learner's next packet on such a
    connection is rejected with a reset, which aborts its own socket too."""
    return [
        "OUTPUT",
        "-p",
        "tcp",
        "--dport",
        str(port),
        "-m",
        "connbytes",
        "--connbytes",
        f"{nbytes}:",
        "--connbytes-dir",
        CONNBYTES_DIR[direction],
        "--connbytes-mode",
        "bytes",
        "-j",
        "REJECT",
        "--reject-with",
        "tcp-reset",
    ]


def data_limit_commands(port: int, nbytes: int, direction: str) -> tuple[str, str]:
    """(inject, heal): insert the rule unless it is there already; delete it while it is there."""
    rule = shlex.join(data_limit_rule(port, nbytes, direction))
    return (
        f"iptables -C {rule} 2>/dev/null || iptables -I {rule}",
        f"while iptables -C {rule} 2>/dev/null; do iptables -D {rule}; done",
    )


def sidecar(image: str) -> Body:
    """The netfault container: idle until an exec step runs one of the commands above in it."""
    return {
        "name": NETFAULT_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done"],
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]},
        },
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
