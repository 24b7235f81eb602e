"""ModelRegistry: every transition of the table, live/LKG pointers, pinning, metrics, swaps."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tests.versions.builders import arm_observations, derived, make_engine, nudged
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.safety.verdict import SafetyCheck
from tether.spec import RobotSpec
from tether.versions.errors import (
    IllegalTransition,
    NoPolicyLoaded,
    UnknownVersion,
    VersionError,
    VersionUnavailable,
)
from tether.versions.model_dir import renumbered
from tether.versions.records import LiveChange, VersionSource, VersionState
from tether.versions.registry import TRANSITIONS, ModelRegistry

S = VersionState


def _registry(base: PolicyBundle, tmp_path: Path, n: int) -> ModelRegistry[PolicyEngine]:
    """A registry with version 1 live and versions 2..n as candidates."""
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    reg.register(make_engine(base), source=VersionSource.BUNDLE)
    for i in range(2, n + 1):
        b = derived(base, tmp_path / f"v{i}", i, f"v{i}", lambda k, t, i=i: nudged(k, t) * i)
        reg.register(make_engine(b), source=VersionSource.LEARNER)
    return reg


def _reach(reg: ModelRegistry[PolicyEngine], v: int, state: VersionState) -> None:
    """Put candidate ``v`` (with 3 as a spare candidate) into ``state`` legally."""
    if state is S.LIVE:
        reg.promote(v, "test")
    elif state is S.RETIRED:
        reg.promote(v, "test")
        reg.promote(3, "test")
    elif state is not S.CANDIDATE:
        reg.transition(v, state, "test")


def test_first_version_is_live_and_later_ones_are_candidates(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg = _registry(base_bundle, tmp_path, 2)
    assert reg.get(1).state is S.LIVE
    assert reg.get(2).state is S.CANDIDATE
    assert reg.live_engine() is reg.engine(1)
    assert reg.last_known_good() is None


def test_an_empty_registry_has_nothing_to_serve() -> None:
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    assert reg.live_engine() is None
    with pytest.raises(NoPolicyLoaded):
        reg.engine_for(None)


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_every_transition_follows_the_table(
    base_bundle: PolicyBundle, tmp_path: Path, source: VersionState, target: VersionState
) -> None:
    reg = _registry(base_bundle, tmp_path, 3)
    _reach(reg, 2, source)
    assert reg.get(2).state is source
    allowed = target in TRANSITIONS[source]
    if target is S.LIVE:
        if allowed:
            reg.promote(2, "test")
            assert reg.get(2).state is S.LIVE
        else:
            with pytest.raises((IllegalTransition, UnknownVersion)):
                reg.promote(2, "test")
        return
    if source is S.LIVE:
        # A live version leaves only through promote (→ retired) or rollback (→ rejected).
        with pytest.raises(IllegalTransition):
            reg.transition(2, target, "test")
        return
    if allowed:
        assert reg.transition(2, target, "why").state is target
        assert reg.get(2).reason == "why"
    else:
        with pytest.raises(IllegalTransition, match=f"from {source.value} to {target.value}"):
            reg.transition(2, target, "test")
        assert reg.get(2).state is source


def test_promotion_keeps_exactly_one_live_and_sets_last_known_good(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg = _registry(base_bundle, tmp_path, 3)
    changes: list[LiveChange] = []
    reg.add_listener(changes.append)
    reg.promote(2, "gate passed")
    assert [r.id for r in reg.records() if r.state is S.LIVE] == [2]
    assert reg.get(1).state is S.RETIRED
    lkg = reg.last_known_good()
    assert lkg is not None
    assert lkg.id == 1
    assert changes[-1].kind == "promotion"
    assert changes[-1].previous is not None
    assert changes[-1].previous.id == 1
    assert changes[-1].current.id == 2


def test_rollback_rejects_live_and_restores_last_known_good(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg = _registry(base_bundle, tmp_path, 3)
    reg.promote(2, "gate passed")
    change = reg.rollback("return dropped by 40")
    assert change.kind == "rollback"
    assert change.current.id == 1
    assert reg.get(2).state is S.REJECTED
    assert "return dropped by 40" in reg.get(2).reason
    assert reg.live_engine() is reg.engine(1)
    # The version rolled back to is live now, not also last-known-good.
    assert reg.last_known_good() is None
    with pytest.raises(VersionError, match="no last-known-good"):
        reg.rollback("again")


def test_pinning_refuses_ungated_versions(base_bundle: PolicyBundle, tmp_path: Path) -> None:
    reg = _registry(base_bundle, tmp_path, 3)
    with pytest.raises(VersionUnavailable, match="candidate"):
        reg.engine_for(2)
    reg.promote(2, "gate passed")
    assert reg.engine_for(1) is reg.engine(1)  # retired: gated and served before
    assert reg.engine_for(None) is reg.engine(2)
    with pytest.raises(UnknownVersion, match="no policy version 99"):
        reg.engine_for(99)


def test_unload_refuses_live_and_drops_engine(base_bundle: PolicyBundle, tmp_path: Path) -> None:
    reg = _registry(base_bundle, tmp_path, 2)
    with pytest.raises(VersionError, match="is live"):
        reg.unload(1)
    assert reg.unload(2).loaded is False
    with pytest.raises(UnknownVersion, match="not loaded"):
        reg.engine(2)
    with pytest.raises(UnknownVersion, match="unloaded"):
        reg.promote(2, "test")


def test_ids_stay_monotonic(base_bundle: PolicyBundle, tmp_path: Path) -> None:
    reg = _registry(base_bundle, tmp_path, 2)
    with pytest.raises(VersionError, match="not fresh"):
        reg.register(make_engine(base_bundle), source=VersionSource.BUNDLE)
    assert reg.next_id_for(1) == 3
    assert reg.next_id_for(7) == 7
    rec = reg.register(
        make_engine(renumbered(base_bundle, 3)), source=VersionSource.BUNDLE, declared_id=1
    )
    assert (rec.id, rec.declared_id) == (3, 1)


def test_metrics_count_steps_checks_and_episodes(base_bundle: PolicyBundle, tmp_path: Path) -> None:
    reg = _registry(base_bundle, tmp_path, 1)
    reg.record_step(1, checks=SafetyCheck.NONE, intervened=False, backup=False)
    reg.record_step(1, checks=SafetyCheck.RATE | SafetyCheck.TORQUE, intervened=True, backup=False)
    reg.record_step(1, checks=SafetyCheck.NON_FINITE, intervened=True, backup=True)
    reg.record_episode(1, episode_return=-10.0, success=True)
    reg.record_episode(1, episode_return=-30.0, success=False)
    m = reg.metrics(1)
    assert (m.steps, m.interventions, m.backups) == (3, 2, 1)
    assert dict(m.interventions_by_check) == {"NON_FINITE": 1, "RATE": 1, "TORQUE": 1}
    assert m.mean_return == -20.0
    assert m.success_rate == 0.5
    assert m.intervention_rate == pytest.approx(2 / 3)


def test_swaps_under_load_happen_between_batches(
    base_bundle: PolicyBundle, tmp_path: Path, spec: RobotSpec
) -> None:
    """Batches racing promotions and rollbacks: none fails, each is one version's output."""
    reg = _registry(base_bundle, tmp_path, 3)
    obs = arm_observations(spec, 16, seed=1)
    reference = {v: reg.engine(v).act(obs, deterministic=True).actions for v in (1, 2, 3)}
    errors: list[BaseException] = []
    seen: set[int] = set()
    batches = [0]
    stop = threading.Event()

    def serve() -> None:
        try:
            while not stop.is_set():
                engine = reg.engine_for(None)  # read once per batch
                out = engine.act(obs, deterministic=True)
                np.testing.assert_array_equal(out.actions, reference[out.version.id])
                seen.add(out.version.id)
                batches[0] += 1
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=serve) for _ in range(2)]
    for w in workers:
        w.start()
    for i in range(40):
        reg.promote(2 + i % 2, "swap")
        start = batches[0]
        while batches[0] < start + 3 and not errors:  # let a few batches run on it
            stop.wait(0.0005)
    stop.set()
    for w in workers:
        w.join(10)
    assert errors == []
    assert seen >= {2, 3}
    assert batches[0] >= 120


def test_version_metrics_are_exported_with_a_version_label(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from tether.serving.version_metrics import VersionCollector

    reg = _registry(base_bundle, tmp_path, 2)
    reg.record_step(1, checks=SafetyCheck.RATE, intervened=True, backup=False)
    reg.record_episode(1, episode_return=-12.5, success=True)
    prom = CollectorRegistry()
    prom.register(VersionCollector(reg))
    text = generate_latest(prom).decode()
    assert 'tether_version_info{name="init-seed0",state="live",version="1"} 1.0' in text
    assert 'tether_version_info{name="v2",state="candidate",version="2"} 1.0' in text
    assert 'tether_version_interventions_total{check="RATE",version="1"} 1.0' in text
    assert 'tether_version_mean_return{version="1"} -12.5' in text
