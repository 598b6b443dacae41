"""Ask a syncer's standard gRPC health service whether it is serving (container health checks).

    python -m trainer.healthcheck 127.0.0.1:50051    # exit 0: SERVING, 1: anything else

Health needs no credential, on purpose: the token interceptor guards only the Syncer service. Calls without one
share a few workers (trainer.admission), so a flood of them from an outsider can get a probe refused at once; the
operator's token ($DILOCO_TOKEN, or ``token``) puts the probe in the operator's own share.
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def serving(address: str, timeout_s: float = 2.0, token: str | None = None) -> bool:
    """Whether the syncer at ``address`` answers SERVING within ``timeout_s`` (``token``: as the operator)."""
    md = (("authorization", f"Bearer {token}"),) if token else None
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s, metadata=md
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m trainer.healthcheck HOST:PORT", file=sys.stderr)
        return 2
    return 0 if serving(args[0], token=os.environ.get("DILOCO_TOKEN") or None) else 1


if __name__ == "__main__":
    sys.exit(main())
