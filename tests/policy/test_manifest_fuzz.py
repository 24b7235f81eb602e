"""Whatever a manifest holds, load_bundle either succeeds or raises a BundleError; never anything else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tether.policy import BundleError, PolicyBundle, load_bundle
from tether.policy.manifest import manifest_from_json

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)


def _paths(doc: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_mutated_manifest_never_escapes_bundle_errors(
    bundle: PolicyBundle, tmp_path: Path, data: st.DataObject
) -> None:
    assert bundle.path is not None
    original = json.loads((bundle.path / "manifest.json").read_text())
    paths = _paths(original)
    target = data.draw(st.sampled_from(paths), label="field")
    action = data.draw(st.sampled_from(["replace", "delete"]), label="action")
    doc = json.loads(json.dumps(original))
    node = doc
    for key in target[:-1]:
        node = node[key]
    if action == "delete":
        del node[target[-1]]
    else:
        node[target[-1]] = data.draw(_JSON, label="value")
    text = json.dumps(doc)
    work = tmp_path / "b"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(bundle.path, work)
    (work / "manifest.json").write_text(text)
    error: BundleError | None = None
    try:
        loaded = load_bundle(work)
    except BundleError as exc:
        error = exc
    if error is not None:
        message = str(error)
        assert str(work) in message, f"the message must name the bundle's file: {message}"
    else:  # the mutation kept the manifest valid: it must mean what it says
        assert loaded.manifest == manifest_from_json(text)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_arbitrary_text_is_a_format_error(text: str) -> None:
    with pytest.raises(BundleError, match=r"^somewhere/manifest\.json: "):
        manifest_from_json(text, "somewhere/manifest.json")
