#!/usr/bin/env bash
# Regenerates the gRPC code in src/tether/v1 and src/tether/kserve from proto/tether/*/*.proto
# (tether.v1, and the KServe v2 protocol, package inference).
# This is the one documented command (docs/protocol.md); CI runs scripts/check_proto.sh,
# which fails when the committed output differs from what this produces.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-src}"
python -m grpc_tools.protoc -I proto --python_out="$out" --grpc_python_out="$out" \
  --pyi_out="$out" proto/tether/v1/*.proto proto/tether/kserve/*.proto
for pkg in v1 kserve; do
  printf '"""Code generated from proto/tether/%s by scripts/gen_proto.sh; do not edit."""\n' \
    "$pkg" >"$out/tether/$pkg/__init__.py"
done
