"""Renders report.html: one self-contained page (inline CSS, no scripts, no network).

The page references its plots as relative ``plots/*.png`` paths so the run directory can
be copied or served as a whole. Every string from the run (messages, robot ids, reasons)
is HTML-escaped: a run directory is data, and a reason may contain ``<``.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from tether.runtime.records import SystemSnapshot
from tether.runtime.report_plots import Plot
from tether.runtime.report_summary import RunSummary, headline
from tether.runtime.report_table import (
    GATE_COLUMNS,
    ROLE_COLUMNS,
    fact_rows,
    gate_events,
    gate_row,
    role_row,
)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #212121; }
h1 { font-size: 1.5em; } .headline { font-size: 1.1em; font-weight: bold; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #cfd8dc; padding: 0.3em 0.6em; text-align: left; }
th { background: #eceff1; }
td.bad { background: #ffcdd2; font-weight: bold; }
.warn { background: #fff3e0; border-left: 4px solid #ef6c00; padding: 0.5em 1em; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eceff1; }
figcaption { color: #546e7a; font-size: 0.9em; }
"""

_MISSING_MEANS = {
    "events.jsonl": "no drift, promotion, rejection, rollback or degradation events",
    "episodes.jsonl": "no episode returns, success rates, violations or contacts",
    "snapshots.jsonl": "no version timeline or degradation levels",
    "latency_ms.npy": "no latency histogram (it is written when the run stops)",
}


def render_html(
    summary: RunSummary, plots: Sequence[Plot], last_snapshot: SystemSnapshot | None
) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tether run report: {escape(summary.run_dir.name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>tether run report: {escape(summary.run_dir.name)}</h1>",
        f'<p class="headline">{escape(headline(summary))}</p>',
        _facts(summary),
        _problems(summary),
        "<h2>Summary by role</h2>",
        _table(
            ROLE_COLUMNS,
            [role_row(r) for r in summary.roles],
            bad_columns=(ROLE_COLUMNS.index("violations"), ROLE_COLUMNS.index("contacts")),
        ),
        _notes(summary.notes),
        "<h2>Promotions, rejections, rollbacks and rollback checks</h2>",
        _gate(summary),
        _system(last_snapshot),
        "<h2>Plots</h2>",
        *(_plot(p) for p in plots),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _facts(s: RunSummary) -> str:
    return _table(("", ""), fact_rows(s), bad_columns=())


def _problems(s: RunSummary) -> str:
    if not s.missing and not s.unreadable:
        return ""
    items = [
        f"<li>missing <code>{escape(name)}</code>: {escape(_MISSING_MEANS.get(name, 'not written'))}</li>"
        for name in s.missing
    ] + [f"<li>unreadable {escape(reason)}</li>" for reason in s.unreadable]
    return (
        '<div class="warn"><p>This run directory is incomplete (a run stopped early?); '
        "the report shows what it holds.</p><ul>" + "".join(items) + "</ul></div>"
    )


def _notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>"


def _gate(s: RunSummary) -> str:
    events = gate_events(s)
    if not events:
        return "<p>None in this run.</p>"
    return _table(GATE_COLUMNS, [gate_row(e) for e in events], bad_columns=())


def _system(snap: SystemSnapshot | None) -> str:
    if snap is None:
        return ""
    rows = (
        ("live version", f"v{snap.live_version}, {snap.live_version_age_s:.0f} s old"),
        ("candidates passed / rejected", f"{snap.candidates_passed} / {snap.candidates_rejected}"),
        ("last rejection", snap.last_rejection or "—"),
        ("rollbacks", str(snap.rollbacks)),
        (
            "learner updates",
            f"{snap.learner_updates_total} ({snap.learner_updates_per_s:.1f}/s at the end)",
        ),
        ("replay size", f"{snap.replay_size} transitions"),
        ("experience log", f"{snap.experience_log_bytes / 1e6:.1f} MB"),
        ("degradation level", snap.degradation_level),
    )
    return f"<h2>System at t = {snap.t_s:.1f} s (last snapshot)</h2>" + _table(
        ("", ""), rows, bad_columns=()
    )


def _plot(p: Plot) -> str:
    if p.file is None:
        return f'<h3>{escape(p.title)}</h3><p class="warn">{escape(p.caption)}</p>'
    return (
        f'<figure><img src="{escape(p.file)}" alt="{escape(p.title)}">'
        f"<figcaption><b>{escape(p.title)}.</b> {escape(p.caption)}</figcaption></figure>"
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], bad_columns: Sequence[int]) -> str:
    head = (
        ""
        if not any(header)
        else "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>"
    )
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            attr = ' class="bad"' if i in bad_columns and cell != "0" else ""
            cells.append(f"<td{attr}>{escape(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return "<table>" + head + "".join(body) + "</table>"
