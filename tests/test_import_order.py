"""The layers import downward only: sim, data < policy < safety < versions < learning,
serving < runtime < fleet < cli (docs/architecture.md).

Every ``import tether.…`` in ``src/tether`` is read from the source (also those inside
functions and ``TYPE_CHECKING`` blocks, which a run-time check would miss) and held to
the order: a module may import its own package, the shared vocabulary, and packages of
a lower rank; packages of one rank do not import each other. ``tether.v1`` (the
generated gRPC code) is for the edge and above, and ``versions`` imports no grpc.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"

# Shared vocabulary, importable from anywhere.
SHARED = {"errors", "spec", "config", "lifeline", "shared_flag", "lazy", "compiled"}
RANK: dict[str, float] = {
    "sim": 1,
    "data": 1,
    "policy": 2,
    "assets": 2.5,  # the shipped bundle: a policy on disk, above policy
    "safety": 3,
    "versions": 4,
    "learning": 5,
    "serving": 5,
    "runtime": 6,
    "fleet": 6.5,  # the Ray backend: wires runtime's pieces into actors
    "cli": 7,
}
V1_RANK = RANK["serving"]  # generated gRPC code: the edge and above
GENERATED = {"v1", "kserve"}  # tether.v1 and the KServe v2 protocol (scripts/gen_proto.sh)
# Third-party packages a layer must not use (the versions layer knows no transport).
FORBIDDEN_THIRD_PARTY = {"versions": {"grpc", "grpc_health", "grpc_reflection"}}


def _package(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def _violations() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        own = _package(path)
        if own in GENERATED or own in SHARED or own == "__init__":
            continue
        for line, module in _imports(path):
            where = f"{path.relative_to(SRC.parent)}:{line} imports {module}"
            top = module.split(".")[0]
            if top in FORBIDDEN_THIRD_PARTY.get(own, set()):
                found.append(f"{where}: {own} may not use {top}")
            if top != "tether" or module == "tether":
                continue
            target = module.split(".")[1]
            if target == own or target in SHARED:
                continue
            if target in GENERATED:
                if RANK[own] < V1_RANK:
                    found.append(f"{where}: tether.{target} is for serving and above")
                continue
            if target not in RANK:
                found.append(f"{where}: {target} has no place in the layer order")
            elif RANK[target] >= RANK[own]:
                found.append(f"{where}: {own} (rank {RANK[own]}) may not import {target}")
    return found


def test_every_package_has_a_rank() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - GENERATED <= set(RANK), sorted(packages - GENERATED - set(RANK))


def test_layers_import_downward_only() -> None:
    assert _violations() == []


@pytest.mark.parametrize(
    ("importer", "module", "allowed"),
    [
        ("versions", "tether.serving.errors", False),
        ("versions", "tether.learning.publication", False),
        ("versions", "tether.policy.engine", True),
        ("learning", "tether.serving.config", False),
        ("serving", "tether.learning.learner", False),
        ("serving", "tether.versions.facade", True),
        ("data", "tether.sim.env", False),
    ],
)
def test_the_rule_itself(importer: str, module: str, allowed: bool) -> None:
    """The rule, on examples, so an empty violation list is not a rule that checks nothing."""
    target = module.split(".")[1]
    assert (target == importer or RANK[target] < RANK[importer]) is allowed
