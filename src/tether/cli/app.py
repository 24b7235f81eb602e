"""Builds the ``tether`` typer application from one module per command group.

Each module listed in ``_COMMAND_MODULES`` exposes ``register(app: typer.Typer)``; it
adds its commands and keeps all logic in importable functions elsewhere in tether.
"""

from __future__ import annotations

import importlib

import typer

_COMMAND_MODULES: tuple[str, ...] = (
    # one line per command module; uncomment yours when it exists
    "admin",
    "export",
    "inspect",
    "pretrain",
    "report",
    "run",
    "serve",
)

app = typer.Typer(
    name="tether",
    help="Serve RL policies to robots, guard every action, and keep learning online.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """tether: policy serving, safety supervision and online learning for robots."""


for _name in _COMMAND_MODULES:
    importlib.import_module(f"tether.cli.{_name}").register(app)


def main() -> None:
    app()
