"""``tether inspect BUNDLE``: print a bundle's manifest and whether it passes verification."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tether.policy.manifest import BundleManifest
from tether.policy.verification import BundleReport, verify_bundle


def inspect(
    bundle: Annotated[Path, typer.Argument(help="bundle directory (manifest.json + weights)")],
    json_output: Annotated[
        bool, typer.Option("--json", help="print the manifest and the verdict as JSON")
    ] = False,
) -> None:
    """Show BUNDLE's manifest and verify it; exit code 1 if any check fails."""
    report = verify_bundle(bundle)
    if json_output:
        doc = {
            "path": str(report.path),
            "ok": report.ok,
            "error_type": report.error_type,
            "error": report.error,
            "tensors_checked": report.tensors_checked,
            "manifest": None if report.manifest is None else json.loads(report.manifest.to_json()),
        }
        typer.echo(json.dumps(doc, indent=2))
    else:
        console = Console()
        if report.manifest is not None:
            console.print(_manifest_table(report.manifest))
            console.print(_io_table(report.manifest))
        console.print(_verdict(report), soft_wrap=True, markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(code=1)


def _manifest_table(m: BundleManifest) -> Table:
    t = Table(title="bundle", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    arch = m.architecture
    rows = [
        ("format version", str(m.format_version)),
        ("version", f"{m.version.id} {m.version.name!r} (parent {m.version.parent})"),
        ("created", m.created_at),
        ("weights", f"{m.weights.file} {m.weights.size_bytes} B sha256 {m.weights.sha256}"),
        (
            "training",
            "none"
            if m.training is None
            else f"{m.training.file} {m.training.size_bytes} B sha256 {m.training.sha256}",
        ),
        (
            "architecture",
            f"{arch.kind} {arch.obs_dim} -> {list(arch.hidden_sizes)} -> {arch.act_dim} {arch.activation}",
        ),
        ("normalizer", f"clip {m.normalizer.clip} epsilon {m.normalizer.epsilon}"),
        (
            "robot",
            f"{m.robot_spec.name if m.robot_spec else '-'} fingerprint {m.robot_fingerprint}",
        ),
        (
            "trained",
            f"{m.metadata.algorithm}: {m.metadata.env_steps} env steps, "
            f"{m.metadata.gradient_updates} updates, seed {m.metadata.seed}",
        ),
    ]
    legs = source_lineage(m.metadata.source)
    rows += [
        (f"source, leg {len(legs) - i}" if len(legs) > 1 else "source", leg)
        for i, leg in enumerate(legs)
    ]
    rows += [(f"metric {k}", f"{v:.6g}") for k, v in m.metadata.metrics]
    for k, v in rows:
        t.add_row(k, v)
    return t


_CONTINUING = re.compile(
    r"^(?P<head>.*?), continuing (?P<prior>'.*'|\".*\") \((?P<steps>\d+) steps\)$", re.S
)


def source_lineage(source: str) -> list[str]:
    """A source string that nests its parents' (``..., continuing '<parent>' (N steps)``),
    as one readable line per training leg, newest first."""
    legs: list[str] = []
    text = source
    while True:
        match = _CONTINUING.match(text)
        if match is None:
            legs.append(text or "-")
            return legs
        try:
            prior = ast.literal_eval(match["prior"])
        except (SyntaxError, ValueError):
            legs.append(text)
            return legs
        legs.append(
            f"{match['head']} (continues the leg below from its {match['steps']} env steps)"
        )
        text = str(prior)


def _io_table(m: BundleManifest) -> Table:
    t = Table(title="observation and action")
    for col in ("side", "index", "name", "mean / low", "std / high"):
        t.add_column(col)
    for i, name in enumerate(m.observation.names):
        std = m.normalizer.var[i] ** 0.5
        t.add_row("obs", str(i), name, f"{m.normalizer.mean[i]:.4g}", f"{std:.4g}")
    for i, name in enumerate(m.action.names):
        t.add_row("act", str(i), name, f"{m.action.low[i]:.4g}", f"{m.action.high[i]:.4g}")
    return t


def _verdict(report: BundleReport) -> str:
    if report.ok:
        return (
            f"verified: {report.path} (format, sizes, sha256, {report.tensors_checked} tensors: "
            "names, shapes, float32, finite; normalizer; action bounds)"
        )
    return f"FAILED: {report.error_type}: {report.error}"


def register(app: typer.Typer) -> None:
    app.command(
        name="inspect", help="Print a bundle's manifest and verify it (exit 1 on failure)."
    )(inspect)
