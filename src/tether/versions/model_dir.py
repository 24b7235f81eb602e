"""Loading bundles into the registry: one bundle (LoadBundle), or a whole model directory (SIGHUP).

A bundle is verified by ``tether.policy.load_bundle`` before anything else sees it; its
declared version id is kept when fresh and replaced by the registry's next id otherwise
(two bundles trained apart may both declare id 1). A reload re-reads every bundle
directory under the model directory and registers those whose weights hash the registry
has not seen — new or changed bundles — as candidates, or promotes them when configured
to (an operator's explicit choice). Loading runs off the event loop; the live engine
keeps serving meanwhile, so a reload drops no request.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether.policy.bundle import PolicyBundle, load_bundle
from tether.policy.errors import BundleError
from tether.policy.manifest import MANIFEST_FILE
from tether.versions.records import VersionRecord, VersionSource
from tether.versions.registry import ModelRegistry

EngineFactory = Callable[[PolicyBundle], Any]


@dataclass(frozen=True)
class ReloadResult:
    """What one reload of the model directory did."""

    loaded: tuple[VersionRecord, ...]
    unchanged: tuple[Path, ...]
    failed: tuple[tuple[Path, str], ...]  # (bundle directory, why it was refused)


def renumbered(bundle: PolicyBundle, version_id: int) -> PolicyBundle:
    """The same bundle under registry id ``version_id`` (lineage and hash unchanged)."""
    if bundle.version.id == version_id:
        return bundle
    version = replace(bundle.version, id=version_id)
    return replace(bundle, manifest=replace(bundle.manifest, version=version))


def load_into(
    registry: ModelRegistry[Any],
    path: Path,
    engine_factory: EngineFactory,
    *,
    make_live: bool = False,
) -> VersionRecord:
    """Verify the bundle at ``path``, build its engine and register it (see module doc)."""
    return _register(registry, load_bundle(path), Path(path), engine_factory, make_live)


def _register(
    registry: ModelRegistry[Any],
    bundle: PolicyBundle,
    path: Path,
    engine_factory: EngineFactory,
    make_live: bool,
) -> VersionRecord:
    declared = bundle.version.id
    bundle = renumbered(bundle, registry.next_id_for(declared))
    record = registry.register(
        engine_factory(bundle), source=VersionSource.BUNDLE, bundle_path=path, declared_id=declared
    )
    live = registry.live()
    if make_live and live is not None and live.id != record.id:
        registry.promote(record.id, f"loaded live by operator choice from {path}")
        record = registry.get(record.id)
    return record


def bundle_directories(model_dir: Path) -> tuple[Path, ...]:
    """Every directory at or directly under ``model_dir`` that holds a bundle manifest."""
    root = Path(model_dir)
    found = [root] if (root / MANIFEST_FILE).is_file() else []
    if root.is_dir():
        found += sorted(p for p in root.iterdir() if (p / MANIFEST_FILE).is_file())
    return tuple(found)


def reload_model_dir(
    registry: ModelRegistry[Any],
    model_dir: Path,
    engine_factory: EngineFactory,
    *,
    make_live: bool = False,
) -> ReloadResult:
    """Register every new or changed bundle under ``model_dir``; a bad one is reported, not fatal."""
    loaded: list[VersionRecord] = []
    unchanged: list[Path] = []
    failed: list[tuple[Path, str]] = []
    for directory in bundle_directories(model_dir):
        try:
            bundle = load_bundle(directory)
        except BundleError as exc:
            failed.append((directory, str(exc)))
            continue
        if registry.find_by_hash(bundle.version.weights_sha256) is not None:
            unchanged.append(directory)
            continue
        record = _register(registry, bundle, directory, engine_factory, make_live)
        loaded.append(record)
    return ReloadResult(tuple(loaded), tuple(unchanged), tuple(failed))


def install_sighup_reload(reload: Callable[[], object]) -> None:
    """Run ``reload`` on SIGHUP from the running asyncio loop, in a worker thread.

    The handler only schedules the work: loading bundles and building engines happens
    off the event loop, so requests keep flowing during a reload.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[object]] = set()  # keeps running reloads from being collected

    def _on_sighup() -> None:
        task = loop.create_task(asyncio.to_thread(reload))
        pending.add(task)
        task.add_done_callback(pending.discard)

    loop.add_signal_handler(signal.SIGHUP, _on_sighup)
