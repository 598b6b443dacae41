"""TLS between learners and the syncer, configured by file paths (real certificates, real sockets).

A self-signed certificate is made with the ``openssl`` command line for
``localhost`` / 127.0.0.1. The syncer serves TLS; a client that trusts it and
presents the token is served; one that presents no token, trusts another CA,
or speaks plaintext is not.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest

from tests.support import tiny_config
from trainer.client import RetryPolicy, SyncClient
from trainer.errors import SyncerUnavailable
from trainer.syncer import serve

pytestmark = pytest.mark.integration
TOKEN = "tls-token"
NO_RETRY = RetryPolicy(attempts=1)


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def tls_syncer(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    cert, key = _self_signed(d, "syncer")
    other_ca, _ = _self_signed(d, "other")
    cfg = tiny_config(**{"token_budget": 10**9, "algorithm.num_learners": 1})
    server, svc, port = serve(
        cfg, d / "run", host="127.0.0.1", port=0, token=TOKEN, tls_cert=str(cert), tls_key=str(key)
    )
    yield cfg, port, cert, other_ca
    svc.shutdown("test over")
    server.stop(0).wait(5)


def test_trusted_client_with_token_is_served(tls_syncer):
    cfg, port, cert, _ = tls_syncer
    with SyncClient(f"localhost:{port}", TOKEN, timeout_s=5.0, tls_ca=str(cert)) as client:
        assert client.join("learner-0", "inc-0", cfg.config_hash()).ok
        assert len(client.get_state("learner-0")) == cfg.algorithm.num_fragments


def test_tls_client_without_token_is_refused(tls_syncer):
    _, port, cert, _ = tls_syncer
    with SyncClient(f"localhost:{port}", None, timeout_s=5.0, tls_ca=str(cert), retry=NO_RETRY) as client:
        with pytest.raises(grpc.RpcError) as err:
            client.status()
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_client_trusting_another_ca_cannot_connect(tls_syncer):
    _, port, _, other_ca = tls_syncer
    with SyncClient(f"localhost:{port}", TOKEN, timeout_s=2.0, tls_ca=str(other_ca), retry=NO_RETRY) as client:
        with pytest.raises(SyncerUnavailable):
            client.status()


def test_plaintext_client_cannot_talk_to_a_tls_syncer(tls_syncer):
    _, port, _, _ = tls_syncer
    with SyncClient(f"127.0.0.1:{port}", TOKEN, timeout_s=2.0, retry=NO_RETRY) as client:
        with pytest.raises(SyncerUnavailable):
            client.status()
