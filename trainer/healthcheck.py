"""Ask a syncer's standard gRPC health service whether it is serving (container health checks).

    python -m trainer.healthcheck 127.0.0.1:50051    # exit 0: SERVING, 1: anything else

Health is unauthenticated on purpose: the token interceptor guards only the Syncer service.
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def serving(address: str, timeout_s: float = 2.0) -> bool:
    """Whether the syncer at ``address`` answers SERVING within ``timeout_s``."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m trainer.healthcheck HOST:PORT", file=sys.stderr)
        return 2
    return 0 if serving(args[0]) else 1


if __name__ == "__main__":
    sys.exit(main())
