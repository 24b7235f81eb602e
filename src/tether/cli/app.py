"""Builds the ``tether`` typer application, loading each command's module on first use.

Each module in ``COMMANDS`` exposes ``register(app: typer.Typer)``; it adds its commands
and keeps all logic in importable functions elsewhere in tether. The root group knows
only the names and one-line helps below, so ``tether --help`` (and a mistyped command)
imports none of torch, MuJoCo or grpc; ``tether <command>`` imports that command's module.
``tests/test_cli_lazy.py`` checks that each one-line help is the command's own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from typer import _click as click  # typer's own click; typer does not re-export it

# command → (module under tether.cli, its one-line help), in the order ``--help`` lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "export": ("export", "Write a bundle as a self-contained TorchScript / torch.export module."),
    "inspect": ("inspect", "Print a bundle's manifest and verify it (exit 1 on failure)."),
    "pretrain": ("pretrain", "Pretrain SAC or PPO on the built-in arm and write a policy bundle."),
    "report": ("report", "Regenerate a run's report.html and print its summary."),
    "run": (
        "run",
        "Serve the pretrained policy to drifting simulated arms while it learns online.",
    ),
    "config": (
        "run",
        "Print the default run configuration as YAML: every section `--config` accepts.",
    ),
    "serve": ("serve", "Serve a policy bundle to robots over gRPC."),
    "admin": ("admin", "Manage policy versions on a running server (AdminService; needs a token)."),
}


class _Deferred(TyperCommand):
    """Stands for a command whose module is not imported yet (name and help only)."""

    def __init__(self, name: str, module: str, short_help: str) -> None:
        super().__init__(name=name, help=short_help, short_help=short_help)
        self.module = module


def load_command(name: str) -> click.Command:
    """Import ``name``'s module and build its click command as typer would."""
    module, _ = COMMANDS[name]
    holder = typer.Typer()
    importlib.import_module(f"tether.cli.{module}").register(holder)
    group = typer.main.get_group(holder)
    command = group.commands.get(name)
    if command is None:  # pragma: no cover - a wrong table entry, caught by tests
        raise RuntimeError(f"tether.cli.{module} does not register a command {name!r}")
    return command


class LazyCommands(TyperGroup):
    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, (module, short_help) in COMMANDS.items():
            self.commands.setdefault(name, _Deferred(name, module, short_help))
        self._listing = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if isinstance(command, _Deferred) and not self._listing:
            command = self.commands[cmd_name] = load_command(cmd_name)
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="tether",
    cls=LazyCommands,
    help="Serve RL policies to robots, guard every action, and keep learning online.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """tether: policy serving, safety supervision and online learning for robots."""


def main() -> None:
    app()
