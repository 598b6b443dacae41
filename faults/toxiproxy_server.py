"""The lifecycle of a real ``toxiproxy-server`` child process (the client it hands out: :mod:`faults.toxiproxy`).

Example:
    with ToxiproxyServer() as server:               # starts .tools/bin/toxiproxy-server on a free port
        tp = server.client()
        tp.create_proxy("learner-0", "127.0.0.1:26000", "127.0.0.1:25000")
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from faults.errors import ToxiproxyError, ToxiproxyNotInstalled
from faults.toxiproxy import Toxiproxy, install_hint
from trainer.lifeline import guarded

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now on ``host`` (the OS may hand it out again later: bind it soon)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class RunningToxiproxy:
    """A Toxiproxy server someone else runs (a CI service, a compose deployment): the same ``url`` and
    ``client()`` as :class:`ToxiproxyServer`, nothing to start or stop."""

    url: str

    @classmethod
    def check(cls, url: str) -> RunningToxiproxy:
        """The server at ``url``, once it has answered GET /version (else an error naming the URL)."""
        server = cls(url.rstrip("/"))
        try:
            server.client().version()
        except ToxiproxyError as err:
            raise ToxiproxyError(
                f"no Toxiproxy server answers at {url} ({err}); start one there, or leave the URL "
                "out to have one started"
            ) from None
        return server

    def client(self, timeout_s: float = 5.0) -> Toxiproxy:
        return Toxiproxy(self.url, timeout_s=timeout_s)


class ToxiproxyServer:
    """A real ``toxiproxy-server`` as a child process of this one; a context manager.

    The child gets PR_SET_PDEATHSIG=SIGKILL, so it dies with us even on SIGKILL. (Linux ties that
    to the *thread* that started it: start it from a thread that outlives the server.) It runs in
    its own session, so a Ctrl-C reaches only us and we can still heal through it before stopping it.

    Example:
        with ToxiproxyServer(log_path="runs/x/logs/toxiproxy.log") as server:
            tp = server.client()
            print(server.url, tp.version())
    """

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 10.0,
        seed: int | None = None,
    ) -> None:
        self.binary = str(binary) if binary is not None else None
        self.seed = seed  # seeds the server's own randomness (latency jitter, slicer sizes); None: it picks one
        self.log_path = Path(log_path) if log_path is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.host = ""
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._temp_log: Path | None = None

    @staticmethod
    def find_binary() -> str:
        """$TOXIPROXY_SERVER, else ``<repo>/.tools/bin/toxiproxy-server``, else ``toxiproxy-server`` on PATH."""
        env = os.environ.get("TOXIPROXY_SERVER")
        if env:
            if os.path.isfile(env) and os.access(env, os.X_OK):
                return env
            raise ToxiproxyNotInstalled(
                f"TOXIPROXY_SERVER={env} is not an executable file; unset it or "
                f"point it at a toxiproxy-server binary ({install_hint()})"
            )
        local = REPO_ROOT / ".tools" / "bin" / "toxiproxy-server"
        if local.is_file() and os.access(local, os.X_OK):
            return str(local)
        on_path = shutil.which("toxiproxy-server")
        if on_path:
            return on_path
        raise ToxiproxyNotInstalled(
            f"no toxiproxy-server found (looked at $TOXIPROXY_SERVER, {local}, PATH); {install_hint()}"
        )

    @property
    def url(self) -> str:
        if not self.port:
            raise ToxiproxyError("the Toxiproxy server is not started; call start() first")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def client(self, timeout_s: float = 5.0) -> Toxiproxy:
        return Toxiproxy(self.url, timeout_s=timeout_s)

    def start(
        self, host: str = "127.0.0.1", port: int = 0, log_path: str | os.PathLike[str] | None = None
    ) -> ToxiproxyServer:
        """Start the server and wait (at most ``startup_timeout_s``) until GET /version answers.

        ``port`` 0 picks a free port. Logs (JSON lines) go to ``log_path`` (or the constructor's), else to
        a temporary file removed on :meth:`stop`.
        """
        if self.running():
            raise ToxiproxyError(f"this Toxiproxy server is already running at {self.url} (pid {self.pid})")
        binary = self.binary or self.find_binary()
        if log_path is not None:
            self.log_path = Path(log_path)
        # The server does not exit when its API port is taken (it logs the error and idles), and it
        # cannot report the port it got for port 0; so we pick a free port, and retry on that rare race.
        attempts = 3 if port == 0 else 1
        last = ""
        for _ in range(attempts):
            chosen = port or free_port(host)
            ok, last = self._start_once(binary, host, chosen)
            if ok:
                return self
        raise ToxiproxyError(
            f"toxiproxy-server ({binary}) did not start on {host}:{port or 'a free port'}: {last}"
        )

    def _start_once(self, binary: str, host: str, port: int) -> tuple[bool, str]:
        log = self.log_path or self._temp_log
        if log is None:
            fd, name = tempfile.mkstemp(prefix="toxiproxy-", suffix=".log")
            os.close(fd)
            log = self._temp_log = Path(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        offset = log.stat().st_size if log.exists() else 0  # a given log file is appended to
        with open(log, "ab") as out:
            # -proxy-metrics: per-proxy byte counters on GET /metrics, for Prometheus (docs/observability.md).
            argv = [
                binary,
                "-host",
                host,
                "-port",
                str(port),
                "-proxy-metrics",
                *(["-seed", str(self.seed % 2**63)] if self.seed is not None else []),
            ]  # its flag is an int64
            self._proc = subprocess.Popen(
                guarded(argv, os.getpid()),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.host, self.port = host, port
        probe = Toxiproxy(self.url, timeout_s=1.0)
        deadline = time.monotonic() + self.startup_timeout_s
        why = f"no answer on GET /version within {self.startup_timeout_s}s"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                why = f"it exited with {self._proc.returncode}"
                break
            if "Server finished with error" in self._log_since(log, offset):
                why = "its API could not listen"
                break
            try:
                probe.version()
            except ToxiproxyError:
                time.sleep(0.05)
                continue
            # Something answered; make sure it is ours and not another server holding the port.
            if "Server finished with error" not in self._log_since(log, offset):
                return True, ""
            why = "its API could not listen"
            break
        tail = self._log_since(log, offset)[-2000:].strip()
        self._kill()
        self.port = 0
        return False, f"{why}; log {log}: {tail or '(empty)'}"

    @staticmethod
    def _log_since(log: Path, offset: int) -> str:
        try:
            with open(log, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; the exit code (None if never started). Idempotent."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._temp_log is not None:
            self._temp_log.unlink(missing_ok=True)
            self._temp_log = None
        return proc.returncode

    def __enter__(self) -> ToxiproxyServer:
        if not self.running():
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
