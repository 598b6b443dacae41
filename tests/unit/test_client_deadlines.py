"""The client gives each call that carries a body a deadline by its size (trainer.core.deadlines): the calls
are recorded by a stub double (no server: what is checked is the timeout each call is made with)."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.client import SyncClient, fragment_nbytes
from trainer.core.deadlines import deadline_s
from trainer.errors import ProtocolError
from trainer.proto import diloco_pb2 as pb
from trainer.wire import CHUNK_BYTES, encode_tensors


class _Recorder:
    """Stands in for the generated stub: records each call's timeout; downloads return nothing, uploads accept."""

    def __init__(self) -> None:
        self.timeouts: dict[str, float] = {}

    def GetFragment(self, req, timeout, metadata):  # noqa: N802, ANN001 - the stub's names
        self.timeouts["GetFragment"] = timeout
        return iter(())

    def GetState(self, req, timeout, metadata):  # noqa: N802, ANN001
        self.timeouts["GetState"] = timeout
        return iter(())

    def Upload(self, messages, timeout, metadata):  # noqa: N802, ANN001
        self.timeouts["Upload"] = timeout
        return pb.UploadReply(accepted=True)


@pytest.fixture
def client():
    c = SyncClient("127.0.0.1:9", None, timeout_s=10.0)  # never connected: the stub is replaced
    c.stub = _Recorder()  # type: ignore[assignment]
    yield c
    c.close()


def test_a_fragment_fetch_waits_its_long_poll_then_a_timeout_per_piece(client):
    nbytes = 3 * CHUNK_BYTES + 1
    with pytest.raises(ProtocolError):  # the double sends nothing back
        client.get_fragment("l", 0, 1, wait_s=2.0, nbytes=nbytes)
    assert client.stub.timeouts["GetFragment"] == 2.0 + 10.0 * 5


def test_a_state_fetch_takes_a_timeout_per_piece_and_never_less_than_three(client):
    client.get_state("l", nbytes=13 * CHUNK_BYTES)
    assert client.stub.timeouts["GetState"] == 10.0 * 14
    client.get_state("l")
    assert client.stub.timeouts["GetState"] == 30.0  # a small state: the three timeouts it always had


def test_an_upload_takes_a_timeout_per_piece_of_its_body(client):
    tensors = {"w": np.zeros(CHUNK_BYTES // 4 * 2 + 1, np.float32)}  # three pieces at float32
    client.upload("l", "i", 0, 0, tensors, 1, 1)
    assert client.stub.timeouts["Upload"] == deadline_s(10.0, 2 * CHUNK_BYTES + 4, CHUNK_BYTES) == 40.0


@pytest.mark.parametrize("shapes", [{"w": (3, 5)}, {"a": (), "b": (7,), "c": (2, 0, 4), "d": (129, 3)}])
def test_fragment_nbytes_is_the_size_the_syncer_sends(shapes):
    tensors = {n: np.ones(s, np.float32) for n, s in shapes.items()}
    assert fragment_nbytes(shapes) == len(encode_tensors(tensors)[1])
