#!/usr/bin/env bash
# The README's test command: install tether with its dev and ray extras (CPU torch pinned by
# constraints.txt), check the generated gRPC code is fresh, lint, type-check, and test.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -c constraints.txt -e ".[dev,ray]"
if [ -x scripts/check_proto.sh ]; then bash scripts/check_proto.sh; fi
ruff check src tests benchmarks
ruff format --check src tests benchmarks
mypy
python -m pytest -q "$@"
