"""``build_report``: turns a run directory into report.html with PNG plots, and
summary.json (the same figures for scripts and CI).

This is what ``tether report RUN_DIR`` runs, and what ``tether run`` runs when it stops.
Invariant: a run directory that exists always gets a report, however incomplete the run;
what is missing is stated in the report, not raised. The report is rewritten whole each
time (a temporary file renamed into place), so a reader never sees half a page.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tether.runtime.records import PLOTS_DIR, REPORT_FILE, SUMMARY_FILE
from tether.runtime.report_config import ReportConfig, ReportError
from tether.runtime.report_data import load_run
from tether.runtime.report_html import render_html
from tether.runtime.report_plots import draw_plots
from tether.runtime.report_summary import RunSummary, summarize, summarize_run, summary_document

# One import for callers (the run wiring, the CLI, acceptance tests).
__all__ = ["ReportConfig", "ReportError", "RunSummary", "build_report", "summarize_run"]


def build_report(run_dir: Path, config: ReportConfig | None = None) -> Path:
    """Write ``run_dir/report.html`` and ``run_dir/plots/*.png``; return the HTML path."""
    config = config or ReportConfig()
    data = load_run(run_dir)
    summary = summarize(data, config)
    try:
        plots = draw_plots(data, summary, config, run_dir / PLOTS_DIR)
        page = render_html(summary, plots, data.snapshots[-1] if data.snapshots else None)
        target = run_dir / REPORT_FILE
        _write_atomically(target, page)
        _write_atomically(
            run_dir / SUMMARY_FILE, json.dumps(summary_document(summary), indent=2) + "\n"
        )
    except OSError as exc:
        raise ReportError(
            f"report for {str(run_dir)!r}: expected to write {REPORT_FILE}, {SUMMARY_FILE} "
            f"and {PLOTS_DIR}/ "
            f"there, failed with {exc}; check the directory is writable and has space"
        ) from exc
    return target


def _write_atomically(target: Path, text: str) -> None:
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
