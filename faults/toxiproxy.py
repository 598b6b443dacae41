"""A small Toxiproxy HTTP client (stdlib urllib); the server process it talks to: :mod:`faults.toxiproxy_server`.

Why not the ``toxiproxy-python`` client (0.1.1, 2019)? Checked against toxiproxy-server 2.12.0
(``tests/integration/test_toxiproxy.py`` keeps the first two checked):

- No request timeouts: every call is ``requests.get/post/delete`` without ``timeout``, so an API that
  accepts the connection but never answers hangs the caller (and the chaos controller) forever.
- Server errors other than 400/404/409 are swallowed: a 500 (e.g. re-enabling a proxy whose listen port
  was taken meanwhile) returns normally, and ``Proxy.enable()`` then records ``enabled = True`` although
  the server still has the proxy disabled; ``create()`` on a 500 fails with a bare ``KeyError('name')``.
- Raised errors carry only the raw body bytes (no method, path or status).
- Host and port are class-level globals (``APIConsumer.host/port``, set by ``update_api_consumer``):
  two servers, or two tests in parallel, cannot be talked to at once.
- No PATCH (enable/disable uses the deprecated POST, which the server logs a warning for), no toxic
  update at all, ``add_toxic`` returns nothing and a duplicate name raises instead of being idempotent.
- No ``POST /populate``: its own ``populate`` compares ``listen`` as strings, so a spec listening on
  ``localhost:P`` never matches the server's resolved ``127.0.0.1:P`` and the proxy is deleted and
  re-created on every call, dropping its live connections.
- ``version()`` returns the raw response bytes (``b'{"version": "2.12.0"}\\n'``), after an extra TCP
  probe that itself has no timeout.

So :class:`Toxiproxy` below is our own client; it needs nothing outside the standard library.

Example:
    with ToxiproxyServer() as server:               # starts .tools/bin/toxiproxy-server on a free port
        tp = server.client()
        tp.create_proxy("learner-0", "127.0.0.1:26000", "127.0.0.1:25000")
        tp.add_toxic("learner-0", Toxic("slow", "latency", "downstream", attributes={"latency": 100}))
        tp.reset()                                   # every proxy enabled, every toxic gone
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults.errors import ToxiproxyError

DEFAULT_URL = "http://127.0.0.1:8474"
STREAMS = ("upstream", "downstream")
_INSTALL_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "install-toxiproxy"


def install_hint() -> str:
    """How to get a toxiproxy-server, for where this copy is: a source checkout has the script that builds one;
    an installed wheel does not, so it names the release page (and the way to use a server already running)."""
    if _INSTALL_SCRIPT.is_file():
        return f"install it with {_INSTALL_SCRIPT} (builds .tools/bin/toxiproxy-server with Go)"
    return (
        "install toxiproxy-server 2.12 (https://github.com/Shopify/toxiproxy/releases) on PATH or in "
        "$TOXIPROXY_SERVER, or point the chaos tests at a running server with --chaos-toxiproxy-url or "
        "$DILOCO_TOXIPROXY_URL"
    )


ADDRESS_IN_USE = "address already in use"  # in the server's error message when it cannot listen


class ToxiproxyApiError(ToxiproxyError):
    """The server answered with an error status; ``status`` and ``server_message`` are its ``{"error", "status"}``."""

    def __init__(self, message: str, status: int, server_message: str) -> None:
        super().__init__(message)
        self.status = status
        self.server_message = server_message


@dataclass(frozen=True)
class ToxicInfo:
    """A toxic as the server reports it (``attributes`` then holds every attribute of the type, defaults too)."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToxicInfo:
        return cls(
            name=data["name"],
            type=data["type"],
            stream=data["stream"],
            toxicity=float(data["toxicity"]),
            attributes=dict(data.get("attributes") or {}),
        )


@dataclass(frozen=True)
class Toxic:
    """A toxic to add. ``stream``: "upstream" acts on client→server bytes, "downstream" on server→client.

    ``toxicity`` is the probability that the toxic applies, drawn once per *connection*, not per request.

    Example:
        Toxic("lat", "latency", "downstream", attributes={"latency": 50, "jitter": 0})
    """

    name: str
    type: str
    stream: str
    toxicity: float = 1.0
    attributes: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }

    def matches(self, info: ToxicInfo) -> bool:
        """Whether ``info`` (what the server has) is this toxic; the server fills in unset attributes, so a subset."""
        return (
            info.type == self.type
            and info.stream == self.stream
            and math.isclose(info.toxicity, self.toxicity, rel_tol=1e-6)
            and all(info.attributes.get(k) == v for k, v in self.attributes.items())
        )


@dataclass(frozen=True)
class ProxySpec:
    """A proxy to create: listen on ``listen`` ("host:port"), forward to ``upstream``.

    Example:
        ProxySpec("learner-0", listen="127.0.0.1:26000", upstream="127.0.0.1:25000")
    """

    name: str
    listen: str
    upstream: str
    enabled: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream, "enabled": self.enabled}


@dataclass(frozen=True)
class ProxyInfo:
    """A proxy as the server reports it; ``listen`` is resolved ("127.0.0.1:41234" even when created with port 0)."""

    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: tuple[ToxicInfo, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProxyInfo:
        return cls(
            name=data["name"],
            listen=data["listen"],
            upstream=data["upstream"],
            enabled=bool(data["enabled"]),
            toxics=tuple(ToxicInfo.from_json(t) for t in data.get("toxics") or ()),
        )

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _check_attributes(toxic_type: str, attributes: dict[str, Any]) -> None:
    """Refuse what the server would accept and then die of: a negative bandwidth rate panics toxiproxy-server
    (a slice with a negative bound) as soon as data flows, taking every proxy down with it."""
    rate = attributes.get("rate")
    if toxic_type == "bandwidth" and isinstance(rate, int | float) and rate < 0:
        raise ToxiproxyError(
            f"refusing a bandwidth toxic with rate {rate}: a negative rate crashes toxiproxy-server"
        )


class Toxiproxy:
    """Client of one Toxiproxy server's HTTP API; every call times out after ``timeout_s``.

    Errors are :class:`ToxiproxyError`: :class:`ToxiproxyApiError` when the server refused a call (the
    message names method, path and the server's message), a plain one when it did not answer.
    ``timeout_s`` bounds each socket operation (connect, each read), which bounds a call against a
    server that is hung or gone.

    Example:
        tp = Toxiproxy("http://127.0.0.1:8474", timeout_s=2.0)
        tp.populate([ProxySpec("learner-0", "127.0.0.1:26000", "127.0.0.1:25000")])
        tp.set_enabled("learner-0", False)     # link down
        tp.reset()
    """

    def __init__(self, url: str = DEFAULT_URL, timeout_s: float = 5.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"Toxiproxy({self.url!r}, timeout_s={self.timeout_s})"

    # -- transport -------------------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        """One HTTP call; the decoded JSON answer (None for an empty body, e.g. 204)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raw = err.read()
            err.close()
            try:
                msg = str(json.loads(raw)["error"])
            except (ValueError, KeyError, TypeError):
                msg = raw.decode(errors="replace").strip() or err.reason
            raise ToxiproxyApiError(
                f"Toxiproxy {method} {path} failed with HTTP {err.code}: {msg}", err.code, msg
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            # URLError wraps refused/unreachable; a bare socket timeout (TimeoutError) or a dropped
            # connection (RemoteDisconnected) can also escape urlopen or read().
            reason = getattr(err, "reason", err)
            raise ToxiproxyError(
                f"the Toxiproxy server at {self.url} is not answering ({method} {path}: {reason!r}, "
                f"timeout {self.timeout_s}s); start one with faults.toxiproxy_server.ToxiproxyServer().start() "
                f"or `.tools/bin/toxiproxy-server -port PORT` (if it is missing, {install_hint()})"
            ) from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ToxiproxyError(f"Toxiproxy {method} {path} answered non-JSON: {raw[:200]!r}") from None

    # -- server and proxies ----------------------------------------------------------------------------------

    def version(self) -> str:
        """The server's version, e.g. "2.12.0" ("git" for a build without a stamped version)."""
        return str(self._call("GET", "/version")["version"])

    def proxies(self) -> dict[str, ProxyInfo]:
        """Every proxy by name."""
        return {name: ProxyInfo.from_json(p) for name, p in self._call("GET", "/proxies").items()}

    def get_proxy(self, name: str) -> ProxyInfo:
        """One proxy; a missing one raises :class:`ToxiproxyApiError` with status 404."""
        return ProxyInfo.from_json(self._call("GET", f"/proxies/{_q(name)}"))

    def create_proxy(self, name: str, listen: str, upstream: str, enabled: bool = True) -> ProxyInfo:
        """Create a proxy (409 if the name exists: use :meth:`populate` for create-or-keep).

        ``listen`` may use port 0; the returned :class:`ProxyInfo` has the port the server picked.
        """
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": enabled}
        return ProxyInfo.from_json(self._call("POST", "/proxies", body))

    def populate(self, specs: list[ProxySpec]) -> list[ProxyInfo]:
        """Make the server have these proxies (POST /populate); idempotent.

        A proxy whose name, resolved listen address and upstream already match is kept with its live
        connections and toxics; one that differs is replaced. The server does not apply ``enabled`` to a
        proxy it keeps, so this does it afterwards. Use fixed listen ports: port 0 never matches, so such
        a proxy is replaced on every call.
        """
        answer = self._call("POST", "/populate", [s.to_json() for s in specs])
        infos = [ProxyInfo.from_json(p) for p in (answer or {}).get("proxies") or ()]
        wanted = {s.name: s.enabled for s in specs}
        return [
            self.set_enabled(p.name, wanted[p.name]) if p.enabled != wanted.get(p.name, p.enabled) else p
            for p in infos
        ]

    def set_enabled(self, name: str, enabled: bool, rebind_s: float = 3.0) -> ProxyInfo:
        """Enable or disable a proxy (PATCH). Disabling closes its listener and every live connection.

        Enabling listens on the proxy's port again. Another process may hold it for a moment (a "free port"
        probe binds and releases one), so "address already in use" is retried for ``rebind_s`` before it raises.
        """
        deadline = time.monotonic() + rebind_s
        while True:
            try:
                return ProxyInfo.from_json(self._call("PATCH", f"/proxies/{_q(name)}", {"enabled": enabled}))
            except ToxiproxyApiError as err:
                if not (enabled and ADDRESS_IN_USE in err.server_message and time.monotonic() < deadline):
                    raise
            time.sleep(0.1)

    def set_upstream(self, name: str, upstream: str) -> ProxyInfo:
        """Point a proxy at another upstream, on the same listen port, with its toxics and enabled state.

        Re-created rather than updated in place: toxiproxy-server 2.12's update (POST /proxies/{name}) blocked
        for its 5 s API timeout while clients were connecting to a dead upstream. Live connections are closed.
        """
        old = self.get_proxy(name)
        self.delete_proxy(name)
        self.create_proxy(name, old.listen, upstream, enabled=False)
        for t in old.toxics:
            self.add_toxic(name, Toxic(t.name, t.type, t.stream, t.toxicity, t.attributes))
        return self.set_enabled(name, old.enabled) if old.enabled else self.get_proxy(name)

    def delete_proxy(self, name: str) -> bool:
        """Delete a proxy; False when there was none (idempotent)."""
        try:
            self._call("DELETE", f"/proxies/{_q(name)}")
        except ToxiproxyApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    def reset(self) -> None:
        """Enable every proxy and remove every toxic (POST /reset)."""
        self._call("POST", "/reset")

    # -- toxics ----------------------------------------------------------------------------------------------

    def toxics(self, proxy: str) -> list[ToxicInfo]:
        """The toxics of one proxy."""
        return [ToxicInfo.from_json(t) for t in self._call("GET", f"/proxies/{_q(proxy)}/toxics")]

    def get_toxic(self, proxy: str, name: str) -> ToxicInfo | None:
        """One toxic, or None when the proxy has no toxic of that name."""
        try:
            return ToxicInfo.from_json(self._call("GET", f"/proxies/{_q(proxy)}/toxics/{_q(name)}"))
        except ToxiproxyApiError as err:
            if err.status == 404 and "toxic" in err.server_message:
                return None
            raise

    def add_toxic(self, proxy: str, toxic: Toxic) -> ToxicInfo:
        """Add a toxic; idempotent by name.

        If a toxic of that name is already there (409) and is the same, it is kept; if only its
        attributes or toxicity differ it is updated in place; if its type or stream differ it is replaced.

        Example:
            tp.add_toxic("learner-0", Toxic("cut", "timeout", "upstream", attributes={"timeout": 0}))
        """
        _check_attributes(toxic.type, toxic.attributes)
        path = f"/proxies/{_q(proxy)}/toxics"
        try:
            return ToxicInfo.from_json(self._call("POST", path, toxic.to_json()))
        except ToxiproxyApiError as err:
            if err.status != 409:
                raise
        existing = self.get_toxic(proxy, toxic.name)
        if existing is None:  # removed between our two calls: add again
            return ToxicInfo.from_json(self._call("POST", path, toxic.to_json()))
        if toxic.matches(existing):
            return existing
        if existing.type == toxic.type and existing.stream == toxic.stream:
            return self.update_toxic(proxy, toxic.name, toxic.attributes, toxic.toxicity)
        self.remove_toxic(proxy, toxic.name)
        return ToxicInfo.from_json(self._call("POST", path, toxic.to_json()))

    def update_toxic(
        self, proxy: str, name: str, attributes: dict[str, Any], toxicity: float | None = None
    ) -> ToxicInfo:
        """Change a toxic's attributes (PATCH; attributes not named keep theirs). Live connections see it at once."""
        existing = self.get_toxic(proxy, name) if "rate" in attributes else None
        if existing is not None:
            _check_attributes(existing.type, attributes)
        body: dict[str, Any] = {"attributes": dict(attributes)}
        if toxicity is not None:
            body["toxicity"] = toxicity
        return ToxicInfo.from_json(self._call("PATCH", f"/proxies/{_q(proxy)}/toxics/{_q(name)}", body))

    def remove_toxic(self, proxy: str, name: str) -> bool:
        """Remove a toxic; False when there was none or the proxy is gone (idempotent)."""
        try:
            self._call("DELETE", f"/proxies/{_q(proxy)}/toxics/{_q(name)}")
        except ToxiproxyApiError as err:
            if err.status == 404:
                return False
            raise
        return True
