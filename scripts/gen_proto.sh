#!/usr/bin/env bash
# Regenerates the gRPC code in src/tether/v1 from proto/tether/v1/*.proto.
# This is the one documented command (docs/protocol.md); CI runs scripts/check_proto.sh,
# which fails when the committed output differs from what this produces.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-src}"
python -m grpc_tools.protoc -I proto --python_out="$out" --grpc_python_out="$out" \
  --pyi_out="$out" proto/tether/v1/*.proto
printf '"""Code generated from proto/tether/v1 by scripts/gen_proto.sh; do not edit."""\n' \
  >"$out/tether/v1/__init__.py"
