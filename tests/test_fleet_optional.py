"""The Ray backend is optional: without Ray, tether imports, and ``--backend ray`` says
which extra to install instead of failing somewhere inside."""

from __future__ import annotations

import subprocess
import sys

# Runs with ``import ray`` made to fail, whether or not Ray is installed here.
_NO_RAY = "import sys\nsys.modules['ray'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _NO_RAY + code],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_tether_and_the_run_config_import_without_ray() -> None:
    done = _run(
        "import tether, tether.fleet, tether.runtime.config as c\n"
        "cfg = c.RunConfig.build({'backend': 'ray', 'ray': {'edges': 3}})\n"
        "assert cfg.backend == 'ray' and cfg.ray.edges == 3\n"
        "assert sys.modules['ray'] is None\n"
    )
    assert done.returncode == 0, done.stderr


def test_backend_ray_without_ray_names_the_extra(tmp_path: object) -> None:
    done = _run(
        "from tether.cli.app import main\n"
        f"sys.argv = ['tether', 'run', '--backend', 'ray', '--duration', '1', '--out', {str(tmp_path)!r}]\n"
        "main()\n"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pip install -e '.[ray]'" in done.stderr.replace("\n", "")
