"""Loading bundles into the registry and re-reading a model directory (what SIGHUP runs)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.versions.builders import HIDDEN, derived, make_engine, nudged
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.policy.initialize import init_bundle
from tether.spec import RobotSpec
from tether.versions.model_dir import load_into, reload_model_dir
from tether.versions.records import VersionSource, VersionState
from tether.versions.registry import ModelRegistry


def test_load_renumbers_a_stale_id_and_keeps_lineage(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec
) -> None:
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    first = load_into(reg, tmp_path / "base", make_engine)
    assert first.state is VersionState.LIVE
    # Another training run's bundle also declares id 1.
    init_bundle(tmp_path / "other", spec, hidden_sizes=HIDDEN, seed=5, version_id=1)
    second = load_into(reg, tmp_path / "other", make_engine)
    assert (second.id, second.declared_id, second.state) == (2, 1, VersionState.CANDIDATE)
    assert reg.engine(2).version.id == 2  # replies name the registry's id
    assert second.source is VersionSource.BUNDLE


def test_reload_loads_new_and_changed_bundles_skips_unchanged_and_reports_broken(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(tmp_path / "base", models / "a")
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    first = reload_model_dir(reg, models, make_engine)
    assert [r.id for r in first.loaded] == [1]
    assert reload_model_dir(reg, models, make_engine).loaded == ()  # nothing changed
    # A new bundle appears, and a broken one (weights modified after writing).
    derived(base_bundle, models / "b", 7, "b", nudged)
    shutil.copytree(models / "a", models / "broken")
    (models / "broken" / "weights.safetensors").write_bytes(b"not weights")
    result = reload_model_dir(reg, models, make_engine)
    assert [(r.id, r.state) for r in result.loaded] == [(7, VersionState.CANDIDATE)]
    assert models / "a" in result.unchanged
    assert [p for p, _ in result.failed] == [models / "broken"]
    live = reg.live()
    assert live is not None
    assert live.id == 1  # a reload never changes live unless configured to


def test_reload_can_make_new_bundles_live_by_config(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    load_into(reg, tmp_path / "base", make_engine)
    models = tmp_path / "models"
    derived(base_bundle, models / "next", 2, "next", nudged)
    result = reload_model_dir(reg, models, make_engine, make_live=True)
    assert [r.state for r in result.loaded] == [VersionState.LIVE]
    lkg = reg.last_known_good()
    assert lkg is not None
    assert lkg.id == 1
