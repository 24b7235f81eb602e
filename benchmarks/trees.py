"""Another checkout's tether in a process of its own: what ``--baseline-src TREE`` runs in
the benchmarks that compare two trees side by side (``bench_contacts``, ``bench_serving``,
``bench_supervisor``). The child imports ``tether`` from that tree's ``src`` and starts in
a directory outside every checkout (a ``python -c`` child puts its working directory
first on its path, where this tree's ``src`` must not shadow the other's).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

TREE_CWD = tempfile.gettempdir()


def tree_src(tree: Path, package: str) -> Path:
    """The ``src`` of checkout ``tree``, which must hold ``tether.<package>``."""
    src = tree.resolve() / "src"
    if not (src / "tether" / package).is_dir():
        raise SystemExit(f"--baseline-src {tree}: expected {src}/tether/{package}")
    return src


def tree_env(src: Path, *more: Path) -> dict[str, str]:
    """This environment with ``src`` (then ``more``) as the child's Python path."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, (src, *more))))


def run_in_tree(src: Path, argv: list[str], *more: Path) -> str:
    """``argv`` run to its end with ``tether`` from ``src``: its standard output (its
    standard error's tail in the SystemExit when it fails)."""
    done = subprocess.run(
        argv, env=tree_env(src, *more), cwd=TREE_CWD, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the run on {src} failed:\n{done.stderr[-3000:]}")
    return done.stdout
