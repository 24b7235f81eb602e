"""Config validation errors as a person reads them: the key's path, what is wrong, and for
a mistyped key the nearest one the section accepts.

pydantic's own text carries internal type tags and a documentation URL per error; a user
who typed ``robts`` wants to read "did you mean 'robots'?". Every config loader formats
its ``ValidationError`` through :func:`describe_validation_error`.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError


def describe_validation_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """One line per error: ``path: message`` (with a suggestion for an unknown key)."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            accepted = _accepted_keys(model, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), accepted, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            where = ".".join(str(p) for p in loc[:-1]) or "the top level"
            lines.append(
                f"{path}: unknown key{hint} ({where} accepts: {', '.join(sorted(accepted))})"
            )
        else:
            found = err.get("input")
            shown = "" if isinstance(found, dict) else f" (got {found!r})"
            lines.append(f"{path}: {err['msg']}{shown}")
    return "\n  ".join(lines)


def _accepted_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        field = current.model_fields.get(str(part)) if _is_model(current) else None
        if field is None or not _is_model(field.annotation):
            return []
        current = field.annotation
    return list(current.model_fields) if _is_model(current) else []


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)
