"""Exported modules run in plain torch (no tether import) and reproduce the engine."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest

from tether.policy import EngineConfig, PolicyBundle, PolicyEngine, load_bundle
from tether.policy.errors import ExportError
from tether.policy.export import export_policy
from tether.policy.selection import probe_observations

# Runs in a fresh interpreter: only torch and numpy, and proves tether was never imported.
_LOADER = """
import sys, json, warnings
import numpy as np, torch
warnings.simplefilter("ignore")
path, fmt, obs_file = sys.argv[1:4]
obs = torch.from_numpy(np.load(obs_file))
if fmt == "torchscript":
    extra = {"manifest.json": ""}
    module = torch.jit.load(path, _extra_files=extra)
    manifest = json.loads(extra["manifest.json"])
else:
    module = torch.export.load(path).module()
    manifest = None
actions, log_probs = module(obs)
one, _ = module(obs[:1])
np.save(obs_file + ".out.npy", np.concatenate([actions.numpy(), log_probs.numpy()[:, None]], 1))
np.save(obs_file + ".one.npy", one.numpy())
print(json.dumps({"tether_imported": any(m.startswith("tether") for m in sys.modules),
                  "version": None if manifest is None else manifest["version"]["id"]}))
"""


@pytest.mark.parametrize("fmt", ["torchscript", "pt2"])
def test_export_loads_without_tether_and_matches_engine(
    tmp_path: Path, bundle: PolicyBundle, fmt: str
) -> None:
    _exported_matches_engine(tmp_path, bundle, fmt)


@pytest.mark.parametrize("fmt", ["torchscript", "pt2"])
def test_the_shipped_position_bundle_exports_with_its_action_frame(
    tmp_path: Path, fmt: str
) -> None:
    """The frame (one step from the observed command) is inside the module: without it
    the exported actions are the actor's tanh outputs, not the commands the engine serves."""
    shipped = load_bundle(Path(str(files("tether.assets") / "pretrained-position" / "arm")))
    assert shipped.manifest.action.frame is not None
    _exported_matches_engine(tmp_path, shipped, fmt)


def _exported_matches_engine(tmp_path: Path, bundle: PolicyBundle, fmt: str) -> None:
    out = tmp_path / f"policy.{fmt}"
    result = export_policy(bundle, out, format=fmt)  # type: ignore[arg-type]
    assert out.is_file()
    assert result.max_action_diff_from_engine <= 1e-5
    engine = PolicyEngine(bundle, EngineConfig(execution="eager"))
    obs = probe_observations(bundle.manifest.normalizer, rows=37, seed=5)
    obs_file = tmp_path / "obs.npy"
    np.save(obs_file, obs)
    proc = subprocess.run(
        [sys.executable, "-c", _LOADER, str(out), fmt, str(obs_file)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["tether_imported"] is False
    if fmt == "torchscript":
        assert info["version"] == bundle.version.id
    got = np.load(str(obs_file) + ".out.npy")
    want = engine.act(obs, True)
    np.testing.assert_allclose(got[:, :-1], want.actions, atol=1e-5)
    np.testing.assert_allclose(got[:, -1], want.log_probs, atol=1e-4, rtol=1e-5)
    np.testing.assert_allclose(np.load(str(obs_file) + ".one.npy")[0], want.actions[0], atol=1e-5)


def test_export_refuses_to_overwrite(tmp_path: Path, bundle: PolicyBundle) -> None:
    out = tmp_path / "p.ts"
    out.write_bytes(b"keep me")
    with pytest.raises(ExportError, match="already exists"):
        export_policy(bundle, out)
    assert out.read_bytes() == b"keep me"
