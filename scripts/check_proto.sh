#!/usr/bin/env bash
# Fails when src/tether/v1 is stale: regenerates into a temp dir and compares.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tether/v1"
bash scripts/gen_proto.sh "$tmp"
if ! diff -r -x __pycache__ "$tmp/tether/v1" src/tether/v1 >/dev/null; then
  diff -r -x __pycache__ "$tmp/tether/v1" src/tether/v1 || true
  echo "src/tether/v1 is stale: run scripts/gen_proto.sh and commit the result" >&2
  exit 1
fi
echo "generated gRPC code is up to date"
