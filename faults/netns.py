"""A network of namespaces: one per unit, bridged, so network faults act on a unit's own interface.

Toxiproxy sits on a learner's one link to the syncer. A system whose units talk peer to peer on ports they choose
(torchft: each replica group's Manager gRPC, checkpoint HTTP server and gloo connections) has no one link to proxy;
there each unit runs in a network namespace of its own, joined to the others by a bridge, and a fault acts on the
unit's interface inside its namespace:

- partition: every packet in or out of the unit's interface dropped (``iptables`` in its namespace: connections
  stay open and go silent, as with Toxiproxy's timeout toxic); ``direction`` to_syncer drops what it sends,
  from_syncer what it receives;
- link down: its interface down (connections fail at once);
- bandwidth: a token bucket (``tc`` ``tbf``) on both ends of its veth pair: what it sends and what it receives.

Latency needs ``netem``, which this project's machines' kernel lacks (``tc`` says "Specified qdisc kind is unknown");
reset and data limit are Toxiproxy's; each is refused here with its reason. Needs root (``CAP_NET_ADMIN``).

Topology, ``tag`` a short run id (Linux interface names are at most 15 bytes)::

    root namespace: bridge dcx<tag> 10.<a>.<b>.1/24   (the coordinator, e.g. torchft's Lighthouse, listens here)
    unit i:         namespace dcx<tag>-<i>, eth0 10.<a>.<b>.<10+i>/24, its veth peer dcx<tag>h<i> on the bridge;
                    host name dcx<tag>-<i> (every unit's /etc/hosts names them all)

:meth:`Namespaces.teardown` deletes every namespace, the bridge and the forwarding rules, whatever state they are
in, and never raises; a network whose owner was SIGKILLed first is removed by the next :meth:`Namespaces.up`
(its owner's pid and what it made are kept under ``/run/diloco-chaos/netns``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from faults.errors import FaultError

NETEM_MISSING = "latency needs the netem qdisc, which this machine's kernel lacks"
ETC_NETNS = Path("/etc/netns")
STATE = Path("/run/diloco-chaos/netns")  # per network: its owner's pid and what it made (Namespaces.sweep)


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise FaultError(
            f"`{' '.join(cmd)}` failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    return done


@dataclass
class Namespaces:
    """One network namespace per unit on one bridge (module docstring). ``up`` builds it; ``teardown`` removes it."""

    tag: str
    units: Sequence[str]
    made: list[str] = field(default_factory=list)  # what exists, in the order made (teardown undoes it)

    @classmethod
    def for_run(cls, run_id: str, units: Sequence[str]) -> Namespaces:
        return cls(hashlib.sha256(run_id.encode()).hexdigest()[:6], list(units))

    @property
    def bridge(self) -> str:
        return f"dcx{self.tag}"

    @property
    def subnet(self) -> str:
        h = int(self.tag, 16)
        return f"10.{200 + h % 50}.{(h >> 8) % 256}"

    @property
    def gateway(self) -> str:
        """The bridge's address in the root namespace: where a coordinator listening there is reached."""
        return f"{self.subnet}.1"

    def namespace(self, unit: str) -> str:
        return f"{self.bridge}-{self._index(unit)}"

    def address(self, unit: str) -> str:
        return f"{self.subnet}.{10 + self._index(unit)}"

    def exec_prefix(self, unit: str) -> list[str]:
        """The command prefix that runs a process inside ``unit``'s namespace, with a host name of its own that
        every unit resolves to its address (a peer that advertises ``socket.gethostname()`` — torchft's checkpoint
        server — is reached there): a UTS namespace for the name, ``/etc/netns/<ns>/hosts`` for the addresses."""
        ns = self.namespace(unit)
        return ["ip", "netns", "exec", ns, "unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', ns]

    def _command(self, unit: str, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(unit), *cmd]

    def _index(self, unit: str) -> int:
        if unit not in self.units:
            raise FaultError(f"{unit!r} has no namespace; these units do: {list(self.units)}")
        return list(self.units).index(unit)

    def _host_end(self, unit: str) -> str:
        return f"{self.bridge}h{self._index(unit)}"

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def up(self) -> None:
        """Build the network (after removing any a process that died without tearing down left behind)."""
        self.sweep()
        STATE.mkdir(parents=True, exist_ok=True)
        self._build()

    def _record(self, made: str) -> None:
        """Note what was made, on disk first: a SIGKILLed owner's network is swept by the next one."""
        self.made.append(made)
        self._state().write_text(json.dumps({"pid": os.getpid(), "made": self.made}))

    def _state(self) -> Path:
        return STATE / f"{self.tag}.json"

    @staticmethod
    def sweep() -> list[str]:
        """Tear down the networks whose owner process is gone (SIGKILLed before its teardown): what was removed."""
        removed: list[str] = []
        for f in sorted(STATE.glob("*.json")) if STATE.is_dir() else []:
            try:
                state = json.loads(f.read_text())
                os.kill(int(state["pid"]), 0)
                continue  # its owner lives: its own
            except ProcessLookupError:
                pass
            except (OSError, ValueError, KeyError):
                continue
            stale = Namespaces(f.stem, [], list(state.get("made", [])))
            stale.teardown()
            removed.append(f.stem)
        return removed

    def _build(self) -> None:
        br = self.bridge
        _run("ip", "link", "add", br, "type", "bridge")
        self._record(f"link:{br}")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", br)
        _run("ip", "link", "set", br, "up")
        # Docker sets the FORWARD policy to DROP, and bridged packets pass it where br_netfilter is loaded.
        _run("iptables", "-I", "FORWARD", "-i", br, "-o", br, "-j", "ACCEPT")
        self._record(f"forward:{br}")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self.address(u)} {self.namespace(u)}\n" for u in self.units)
        for unit in self.units:
            ns, host, i = self.namespace(unit), self._host_end(unit), self._index(unit)
            _run("ip", "netns", "add", ns)
            self._record(f"netns:{ns}")
            etc = ETC_NETNS / ns  # `ip netns exec` mounts what is here over /etc
            etc.mkdir(parents=True, exist_ok=True)
            self._record(f"etc:{etc}")
            (etc / "hosts").write_text(hosts)
            _run("ip", "link", "add", host, "type", "veth", "peer", "name", f"{br}n{i}")
            # Deleted with its namespace too, but the kernel does that asynchronously: deleting the pair first
            # frees the names at once (a new network of the same tag would find them taken).
            self._record(f"link:{host}")
            _run("ip", "link", "set", f"{br}n{i}", "netns", ns)
            _run("ip", "-n", ns, "link", "set", f"{br}n{i}", "name", "eth0")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(unit)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "link", "set", host, "master", br)
            _run("ip", "link", "set", host, "up")

    def teardown(self) -> list[str]:
        """Remove everything :meth:`up` made, in reverse order; the problems, never raises."""
        problems: list[str] = []
        for what in reversed(self.made):
            kind, name = what.split(":", 1)
            if kind == "etc":
                shutil.rmtree(name, ignore_errors=True)
                continue
            cmd = {
                "netns": ("ip", "netns", "del", name),
                "link": ("ip", "link", "del", name),
                "forward": ("iptables", "-D", "FORWARD", "-i", name, "-o", name, "-j", "ACCEPT"),
            }[kind]
            try:
                done = _run(*cmd, check=False)
            except (OSError, subprocess.SubprocessError) as err:
                problems.append(f"{' '.join(cmd)}: {err}")
                continue
            if done.returncode != 0:
                problems.append(f"{' '.join(cmd)}: {done.stderr.strip()}")
        self.made.clear()
        self._state().unlink(missing_ok=True)
        return problems

    def left(self) -> list[str]:
        """This network's namespaces and links still on the machine (after teardown: none)."""
        names = _run("ip", "netns", "list", check=False).stdout.split()
        links = _run("ip", "-o", "link", "show", check=False).stdout
        return [n for n in names if n.startswith(self.bridge)] + (
            [self.bridge] if f" {self.bridge}:" in links or f" {self.bridge}@" in links else []
        )

    # ---- faults ------------------------------------------------------------------------------------------------
    def cut(self, unit: str, direction: str = "both") -> None:
        """Drop the unit's packets (``direction``: both, to_syncer = what it sends, from_syncer = what it gets)."""
        for chain, flag in self._chains(direction):
            self._in(unit, "iptables", "-I", chain, flag, "eth0", "-j", "DROP")

    def mend(self, unit: str) -> bool:
        """Undo :meth:`cut` (whatever direction); whether there was a cut."""
        removed = False
        for chain, flag in self._chains("both"):
            while self._in(unit, "iptables", "-D", chain, flag, "eth0", "-j", "DROP", check=False).returncode == 0:
                removed = True
        return removed

    def link(self, unit: str, up: bool) -> None:
        self._in(unit, "ip", "link", "set", "eth0", "up" if up else "down")

    def throttle(self, unit: str, rate_bytes_s: int) -> None:
        """A token bucket of ``rate_bytes_s`` on both ends of the unit's veth pair (each end shapes what it sends)."""
        rate = f"{max(rate_bytes_s * 8, 8000)}bit"
        burst = f"{max(rate_bytes_s // 10, 16_000)}b"
        self._on_both_ends(unit, "replace", "tbf", "rate", rate, "burst", burst, "latency", "1s")

    def unthrottle(self, unit: str) -> bool:
        return any(done.returncode == 0 for done in self._on_both_ends(unit, "del", check=False))

    def _on_both_ends(
        self, unit: str, verb: str, *qdisc: str, check: bool = True
    ) -> list[subprocess.CompletedProcess[str]]:
        """``tc qdisc <verb>`` at the root of both ends of the unit's veth pair: eth0 in its namespace, its peer on
        the bridge."""
        inside = self._in(unit, "tc", "qdisc", verb, "dev", "eth0", "root", *qdisc, check=check)
        return [inside, _run("tc", "qdisc", verb, "dev", self._host_end(unit), "root", *qdisc, check=check)]

    def _in(self, unit: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(*self._command(unit, *cmd), check=check)

    @staticmethod
    def _chains(direction: str) -> list[tuple[str, str]]:
        return {
            "both": [("INPUT", "-i"), ("OUTPUT", "-o")],
            "to_syncer": [("OUTPUT", "-o")],
            "from_syncer": [("INPUT", "-i")],
        }[direction]
