"""``tether export BUNDLE OUT``: write a bundle as a standalone TorchScript or torch.export module."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tether.policy import PolicyError, load_bundle
from tether.policy.export import export_policy


class _Format(StrEnum):
    torchscript = "torchscript"
    pt2 = "pt2"


def export(
    bundle: Annotated[Path, typer.Argument(help="bundle directory (manifest.json + weights)")],
    out: Annotated[Path, typer.Argument(help="file to write (e.g. policy.ts or policy.pt2)")],
    format: Annotated[
        _Format,
        typer.Option(
            help="torchscript: load with torch.jit.load; pt2: load with torch.export.load(...).module()"
        ),
    ] = _Format.torchscript,
    tolerance: Annotated[
        float,
        typer.Option(help="largest action difference from the engine accepted (action units)"),
    ] = 1e-5,
    overwrite: Annotated[bool, typer.Option(help="replace OUT if it exists")] = False,
) -> None:
    """Export BUNDLE (normalization and action scaling included) to OUT, checked against the engine."""
    if out.exists() and not overwrite:
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(str(out))} already exists; pass --overwrite to "
            "replace it, or choose another file",
            soft_wrap=True,
        )
        raise typer.Exit(code=1)
    try:
        result = export_policy(
            load_bundle(bundle), out, format=format.value, tolerance=tolerance, overwrite=overwrite
        )
    except PolicyError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(code=1) from exc
    Console().print(
        f"wrote {result.path} ({result.format}); max action difference from the engine on "
        f"{result.probe_rows} probe rows: {result.max_action_diff_from_engine:.3g}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command(
        name="export", help="Write a bundle as a self-contained TorchScript / torch.export module."
    )(export)
