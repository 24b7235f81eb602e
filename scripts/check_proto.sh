#!/usr/bin/env bash
# Fails when src/tether/v1 or src/tether/kserve is stale: regenerates into a temp dir and compares.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tether/v1" "$tmp/tether/kserve"
bash scripts/gen_proto.sh "$tmp"
for pkg in v1 kserve; do
  if ! diff -r -x __pycache__ "$tmp/tether/$pkg" "src/tether/$pkg" >/dev/null; then
    diff -r -x __pycache__ "$tmp/tether/$pkg" "src/tether/$pkg" || true
    echo "src/tether/$pkg is stale: run scripts/gen_proto.sh and commit the result" >&2
    exit 1
  fi
done
echo "generated gRPC code is up to date"
