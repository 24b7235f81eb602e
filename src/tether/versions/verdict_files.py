"""Learner-side gate verdicts on disk: one JSON file per candidate version.

The learner judges every candidate (offline and simulation stages) before it publishes,
and writes the outcome as ``<verdict_dir>/<version>.json`` -- passed or not -- so the
server can hand the verdicts of a published candidate to its own gate as ``prior`` and
record the candidates the learner rejected (those never reach shared memory).

Schema: ``{"version", "parent", "passed", "verdicts": [{"stage", "candidate",
"baseline", "samples", "measurements": [{"name", "value", "threshold",
"direction"}], "figures": [{"name", "value"}]}]}`` (``figures``, the numbers reported
but not judged, may be absent in older files). Non-finite values are written as JSON's ``NaN``/``Infinity``
extensions, which Python reads back.

Invariant: a verdict file is complete or absent. It is written to a temporary sibling
and renamed into place, and it is on disk before its version is published.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, cast

from tether.versions.errors import VerdictFileError
from tether.versions.records import Figure, GateRecord, GateStage, Measurement, StageVerdict

_SUFFIX = ".json"


def verdict_path(verdict_dir: str | os.PathLike[str], version: int) -> Path:
    return Path(verdict_dir) / f"{version}{_SUFFIX}"


def _to_json(record: GateRecord) -> dict[str, Any]:
    return {
        "version": record.version,
        "parent": record.parent,
        "passed": record.passed,
        "verdicts": [
            {
                "stage": v.stage.value,
                "candidate": v.candidate,
                "baseline": v.baseline,
                "samples": v.samples,
                "measurements": [
                    {
                        "name": m.name,
                        "value": m.value,
                        "threshold": m.threshold,
                        "direction": m.direction,
                    }
                    for m in v.measurements
                ],
                "figures": [{"name": f.name, "value": f.value} for f in v.figures],
            }
            for v in record.verdicts
        ],
    }


def _from_json(data: dict[str, Any]) -> GateRecord:
    verdicts = tuple(
        StageVerdict(
            stage=GateStage(v["stage"]),
            candidate=int(v["candidate"]),
            baseline=int(v["baseline"]),
            measurements=tuple(
                Measurement(
                    str(m["name"]),
                    float(m["value"]),
                    float(m["threshold"]),
                    cast(Literal["<=", ">="], _direction(m["direction"])),
                )
                for m in v["measurements"]
            ),
            samples=int(v["samples"]),
            # Records written before figures existed have none.
            figures=tuple(Figure(str(f["name"]), float(f["value"])) for f in v.get("figures", ())),
        )
        for v in data["verdicts"]
    )
    return GateRecord(
        version=int(data["version"]),
        parent=int(data["parent"]),
        passed=bool(data["passed"]),
        verdicts=verdicts,
    )


def _direction(value: object) -> str:
    if value not in ("<=", ">="):
        raise ValueError(f"direction {value!r}, expected '<=' or '>='")
    return str(value)


def write_gate_record(verdict_dir: str | os.PathLike[str], record: GateRecord) -> Path:
    """Write ``record`` atomically as ``<verdict_dir>/<version>.json``; returns its path."""
    target = verdict_path(verdict_dir, record.version)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(_to_json(record), indent=1), encoding="utf-8")
    os.replace(tmp, target)
    return target


def read_gate_record(verdict_dir: str | os.PathLike[str], version: int) -> GateRecord | None:
    """The learner's record for ``version``, or None when it wrote none."""
    path = verdict_path(verdict_dir, version)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        record = _from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise VerdictFileError(
            f"{path}: not a learner gate verdict ({exc}); expected the schema of "
            "tether.versions.verdict_files; delete the file if it was not written by the learner"
        ) from exc
    if record.version != version:
        raise VerdictFileError(
            f"{path}: names version {record.version}, expected {version}; the file was "
            "renamed or copied by hand, delete it"
        )
    return record


def read_gate_verdicts(
    verdict_dir: str | os.PathLike[str], version: int
) -> tuple[StageVerdict, ...] | None:
    """The learner-side stage verdicts of ``version`` (the server's ``prior``), or None."""
    record = read_gate_record(verdict_dir, version)
    return None if record is None else record.verdicts


def gate_record_versions(verdict_dir: str | os.PathLike[str]) -> tuple[int, ...]:
    """Versions with a verdict file in ``verdict_dir``, ascending (empty if it is missing)."""
    root = Path(verdict_dir)
    if not root.is_dir():
        return ()
    versions = [
        int(p.name[: -len(_SUFFIX)])
        for p in root.iterdir()
        if p.name.endswith(_SUFFIX) and p.name[: -len(_SUFFIX)].isdigit()
    ]
    return tuple(sorted(versions))


def list_gate_records(
    verdict_dir: str | os.PathLike[str], *, after: int | None = None
) -> tuple[GateRecord, ...]:
    """Every record in version order; only versions above ``after`` when it is given."""
    out = []
    for version in gate_record_versions(verdict_dir):
        if after is not None and version <= after:
            continue
        record = read_gate_record(verdict_dir, version)
        if record is not None:
            out.append(record)
    return tuple(out)
