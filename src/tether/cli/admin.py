"""``tether admin ...``: manage policy versions on a running server through AdminService.

Thin: every command is one :class:`tether.serving.admin_client.AdminClient` call and a
table. The token comes from ``--token`` or ``TETHER_ADMIN_TOKEN`` (so it need not appear
in shell history); a refused call prints the server's message and exits with code 1.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tether.serving.admin_client import AdminCallError, AdminClient
from tether.v1 import admin_pb2 as apb, policy_pb2 as pb

T = TypeVar("T")

DEFAULT_ADMIN_PORT = 50052  # VersionsConfig.admin_port
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_ADMIN_PORT}"

# The connection options are accepted on the group (``tether admin --target ... list``) and
# after the command (``tether admin list --target ...``); the command's own value wins.
Target = Annotated[
    str | None,
    typer.Option("--target", help=f"AdminService address, host:port (default {DEFAULT_TARGET})"),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="TETHER_ADMIN_TOKEN",
        help="bearer token of an admin identity (or set TETHER_ADMIN_TOKEN)",
    ),
]
TlsCa = Annotated[
    Path | None,
    typer.Option("--tls-ca", help="PEM root certificate: connect with TLS and verify the server"),
]
Timeout = Annotated[
    float | None, typer.Option("--timeout", help="deadline of the call (s; default per command)")
]


@dataclass(frozen=True)
class Connection:
    """Where and how to reach AdminService, as given on the group."""

    target: str | None = None
    token: str | None = None
    tls_ca: Path | None = None
    timeout_s: float | None = None


_STATE_STYLE = {
    apb.VERSION_STATE_CANDIDATE: "cyan",
    apb.VERSION_STATE_SHADOW: "blue",
    apb.VERSION_STATE_CANARY: "yellow",
    apb.VERSION_STATE_LIVE: "bold green",
    apb.VERSION_STATE_RETIRED: "dim",
    apb.VERSION_STATE_REJECTED: "red",
}


def _call(
    ctx: typer.Context,
    target: str | None,
    token: str | None,
    tls_ca: Path | None,
    timeout: float | None,
    fn: Callable[[AdminClient], T],
    *,
    default_timeout_s: float = 10.0,
) -> T:
    group = _group_connection(ctx)
    address = target or group.target or DEFAULT_TARGET
    bearer = token if token is not None else (group.token or "")
    ca = tls_ca or group.tls_ca
    deadline = timeout or group.timeout_s or default_timeout_s
    try:
        with AdminClient(address, bearer, root_certificates=ca, timeout_s=deadline) as client:
            return fn(client)
    except AdminCallError as exc:
        message = str(exc)
        if "UNIMPLEMENTED" in message:
            message += (
                f"; {address} does not serve AdminService: point --target at the admin port "
                f"(`tether serve --admin-port`, default {DEFAULT_ADMIN_PORT}), not the policy port"
            )
        Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
        raise typer.Exit(code=1) from None


def _group_connection(ctx: typer.Context) -> Connection:
    parent = ctx.parent
    while parent is not None:
        if isinstance(parent.obj, Connection):
            return parent.obj
        parent = parent.parent
    return Connection()


def state_name(state: int) -> str:
    return apb.VersionState.Name(state).removeprefix("VERSION_STATE_").lower()


def versions_table(entries: Iterable[apb.VersionEntry], title: str = "policy versions") -> Table:
    """The readable table of versions every command prints."""
    t = Table(title=title)
    columns = "id name state traffic requests episodes return success interv. backups parent"
    for col in (*columns.split(), "sha256", "created", "reason"):
        numeric = col not in {"name", "state", "sha256", "created", "reason"}
        t.add_column(col, justify="right" if numeric else "left", overflow="fold")
    for e in entries:
        m = e.metrics
        state = state_name(e.state) + (" (lkg)" if e.last_known_good else "")
        t.add_row(
            str(e.id) if e.declared_id in (0, e.id) else f"{e.id} (was {e.declared_id})",
            escape(e.name),
            f"[{_STATE_STYLE.get(e.state, '')}]{state}[/]",
            f"{e.traffic_weight:.0%}" if e.traffic_weight else "-",
            str(m.requests),
            str(m.episodes),
            f"{m.mean_return:.1f}" if m.episodes else "-",
            f"{m.success_rate:.0%}" if m.episodes else "-",
            f"{m.interventions}/{m.steps}" if m.steps else "-",
            str(m.backups),
            str(e.parent) if e.HasField("parent") else "-",
            e.weights_sha256[:12],
            dt.datetime.fromtimestamp(e.created_at_s, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            escape(e.reason),
        )
    return t


def _print(*renderables: object) -> None:
    console = Console()
    for r in renderables:
        console.print(r)


def list_versions(
    ctx: typer.Context,
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """List every version with its state, traffic share and numbers."""
    reply = _call(ctx, target, token, tls_ca, timeout, lambda c: c.list_versions())
    summary = [
        f"live: {reply.live_version if reply.HasField('live_version') else 'none'}",
        f"last-known-good: {reply.last_known_good if reply.HasField('last_known_good') else 'none'}",
    ]
    if reply.HasField("canary_version"):
        summary.append(f"canary: {reply.canary_version} in {reply.canary_fraction:.0%} of episodes")
    if reply.HasField("check_version"):
        summary.append(
            f"rollback check: {reply.check_version} beside live in "
            f"{reply.check_fraction:.0%} of episodes"
        )
    _print(versions_table(reply.versions), "  ".join(summary))


def load(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="bundle directory on the server's file system")],
    live: Annotated[
        bool, typer.Option("--live", help="make it live at once, skipping the gate")
    ] = False,
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """Load and verify a bundle; it becomes a candidate (or live with --live)."""
    entry = _call(
        ctx,
        target,
        token,
        tls_ca,
        timeout,
        lambda c: c.load_bundle(path, make_live=live),
        default_timeout_s=60.0,
    )
    _print(versions_table([entry], title="loaded"))


def unload(
    ctx: typer.Context,
    version: Annotated[int, typer.Argument(help="version id to unload (not the live one)")],
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """Free a version's engine; its record and numbers stay listed."""
    entry = _call(ctx, target, token, tls_ca, timeout, lambda c: c.unload(version))
    _print(versions_table([entry], title="unloaded"))


def parse_weights(pairs: Iterable[str]) -> dict[int, float]:
    """``["1=0.9", "2=0.1"]`` to ``{1: 0.9, 2: 0.1}``; raises typer.BadParameter on bad input."""
    weights: dict[int, float] = {}
    for pair in pairs:
        version, sep, weight = pair.partition("=")
        try:
            if not sep:
                raise ValueError
            weights[int(version)] = float(weight)
        except ValueError:
            raise typer.BadParameter(
                f"expected VERSION=WEIGHT such as 2=0.1, got {pair!r}"
            ) from None
    return weights


def traffic(
    ctx: typer.Context,
    weights: Annotated[
        list[str] | None,
        typer.Argument(help="VERSION=WEIGHT pairs, e.g. 1=0.9 2=0.1; none sends all to live"),
    ] = None,
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """Split sessions between live/retired versions by weight (sticky per session)."""
    parsed = parse_weights(weights or [])
    split = _call(ctx, target, token, tls_ca, timeout, lambda c: c.set_traffic(parsed))
    t = Table(title="traffic split")
    t.add_column("version", justify="right")
    t.add_column("share", justify="right")
    for v, w in split:
        t.add_row(str(v), f"{w:.1%}")
    _print(t if split else "all sessions follow the live version")


def promote(
    ctx: typer.Context,
    version: Annotated[int, typer.Argument(help="version id to promote")],
    reason: Annotated[str, typer.Option(help="why; recorded with the operator's name")] = "",
    skip_gate: Annotated[
        bool, typer.Option("--skip-gate", help="make a candidate live without the gate")
    ] = False,
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """Promote a version: a candidate enters the gate, a retired or canary version goes live."""
    entry = _call(
        ctx,
        target,
        token,
        tls_ca,
        timeout,
        lambda c: c.promote(version, reason=reason, skip_gate=skip_gate),
    )
    _print(versions_table([entry], title="promoted"))


def rollback(
    ctx: typer.Context,
    reason: Annotated[str, typer.Option(help="why; recorded with the operator's name")] = "",
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """Reject the live version and make the last-known-good one live again."""
    reply = _call(ctx, target, token, tls_ca, timeout, lambda c: c.rollback(reason))
    _print(versions_table([reply.live], title=f"rolled back version {reply.rolled_back}"))


def resume(
    ctx: typer.Context,
    reason: Annotated[str, typer.Option(help="why it is safe to resume")] = "",
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """Leave TAKEOVER: the policy controls the robot again (operator only)."""
    reply = _call(ctx, target, token, tls_ca, timeout, lambda c: c.resume(reason))
    level = pb.DegradationLevel.Name(reply.level).removeprefix("DEGRADATION_LEVEL_")
    _print(f"resumed by {reply.operator}: degradation level is now {level}")


def reload(
    ctx: typer.Context,
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """Re-read the model directory and load new or changed bundles (like SIGHUP)."""
    reply = _call(
        ctx, target, token, tls_ca, timeout, lambda c: c.reload(), default_timeout_s=120.0
    )
    _print(versions_table(reply.loaded, title="loaded by reload"))
    if reply.unchanged:
        _print(f"unchanged: {', '.join(reply.unchanged)}")
    for f in reply.failed:
        Console(stderr=True).print(f"[bold red]refused[/] {escape(f.path)}: {escape(f.reason)}")
    if reply.failed:
        raise typer.Exit(code=1)


def _connect(
    ctx: typer.Context,
    target: Target = None,
    token: Token = None,
    tls_ca: TlsCa = None,
    timeout: Timeout = None,
) -> None:
    """Manage policy versions on a running server (AdminService; needs a token)."""
    ctx.obj = Connection(target, token, tls_ca, timeout)


def register(app: typer.Typer) -> None:
    admin = typer.Typer(name="admin", no_args_is_help=True, callback=_connect)
    admin.command(name="list", help="List versions, states, traffic and numbers.")(list_versions)
    admin.command(name="load", help="Load a bundle as a candidate (or live with --live).")(load)
    admin.command(name="unload", help="Unload a version's engine.")(unload)
    admin.command(name="traffic", help="Set the A/B traffic split (VERSION=WEIGHT ...).")(traffic)
    admin.command(name="promote", help="Promote a version (candidates enter the gate).")(promote)
    admin.command(name="rollback", help="Roll back to the last-known-good version.")(rollback)
    admin.command(name="resume", help="Leave TAKEOVER after a safety stop.")(resume)
    admin.command(name="reload", help="Re-read the model directory (like SIGHUP).")(reload)
    app.add_typer(admin)
