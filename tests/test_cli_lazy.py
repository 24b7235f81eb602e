"""The CLI and the packages load lazily: ``tether --help`` and ``import tether.<pkg>``
pull in no torch, MuJoCo, grpc or matplotlib, and what they list is what loads."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tether.cli.app import COMMANDS, load_command
from tether.lazy import export_table

HEAVY = ("torch", "mujoco", "grpc", "matplotlib", "pyarrow")
LAZY_PACKAGES = ("data", "learning", "policy", "safety", "sim")


def _heavy_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    last = (out.stdout.splitlines() or [""])[-1]
    return [m for m in last.split(",") if m]


def test_root_help_and_a_typo_import_nothing_heavy() -> None:
    code = (
        "from typer.testing import CliRunner\n"
        "from tether.cli.app import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0 and 'pretrain' in r.output, r.output\n"
        "r = CliRunner().invoke(app, ['rnu'])\n"
        "assert r.exit_code == 2 and \"Did you mean 'run'\" in r.output, r.output"
    )
    assert _heavy_after(code) == []


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_importing_a_package_runs_none_of_its_exports(package: str) -> None:
    assert _heavy_after(f"import tether.{package}") == []


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_export_resolves_to_the_module_that_defines_it(package: str) -> None:
    module = importlib.import_module(f"tether.{package}")
    assert module.__file__ is not None
    table = export_table(module.__name__, module.__file__)
    assert table, f"tether.{package} exports nothing"
    for name, (source, attribute) in table.items():
        assert getattr(module, name) is getattr(importlib.import_module(source), attribute)
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        _ = module.not_a_name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_help_is_the_commands_own(name: str) -> None:
    _, listed = COMMANDS[name]
    command = load_command(name)
    assert command.name == name
    assert command.get_short_help_str(limit=200) == listed


def test_networks_pin_the_blas_before_any_gemm() -> None:
    code = (
        "import tether.policy.networks\n"
        "from tether.policy.numerics import blas_pin\n"
        "print(blas_pin().batch_invariant)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "True"
