#!/usr/bin/env bash
# Regenerates the committed protobuf/gRPC modules from diloco.proto.
# Run from anywhere; needs grpcio-tools (a dev dependency).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. trainer/proto/diloco.proto
