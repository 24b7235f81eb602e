"""Lazy package exports: a package's public names load their module on first use.

A package ``__init__`` lists its public names once, as ``from … import …`` statements
inside ``if TYPE_CHECKING:`` (so type checkers and readers see real imports), and ends
with::

    __getattr__, __dir__ = lazy_exports(__name__, __file__)

Importing the package then runs none of those imports; ``package.name`` (or ``from
package import name``) imports the one module that defines ``name`` and caches the value
in the package. This keeps ``tether --help`` and a robot-side client from loading torch
and MuJoCo just because they touched a package that also exports them.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _resolve(package: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        if node.module is None:  # pragma: no cover - not valid Python
            raise ValueError("absolute import without a module")
        return node.module
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def export_table(package: str, init_file: str) -> dict[str, tuple[str, str]]:
    """Map each name imported under ``if TYPE_CHECKING:`` in ``init_file`` to (module, attribute)."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"), filename=init_file)
    table: dict[str, tuple[str, str]] = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.If) and _is_type_checking(stmt.test)):
            continue
        for node in stmt.body:
            if not isinstance(node, ast.ImportFrom):
                raise ValueError(
                    f"{init_file}:{node.lineno}: only 'from … import …' belongs in the "
                    "TYPE_CHECKING export block"
                )
            module = _resolve(package, node)
            for alias in node.names:
                name = alias.asname or alias.name
                if name in table:
                    raise ValueError(f"{init_file}: {name!r} is exported twice")
                if module == f"{package}.{name}":
                    # importing that submodule would rebind the package's name to it
                    raise ValueError(
                        f"{init_file}: {name!r} is also the name of the module it comes from"
                    )
                table[name] = (module, alias.name)
    return table


def lazy_exports(
    package: str, init_file: str
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return the ``__getattr__`` and ``__dir__`` of a package with lazy exports.

    The package's ``__all__``, when it has one, must name exactly the exported names
    and the names the package defines itself before this call.
    """
    table = export_table(package, init_file)
    namespace = sys.modules[package].__dict__
    declared = namespace.get("__all__")
    if declared is not None and set(declared) != set(table) | (set(declared) & set(namespace)):
        missing = sorted(set(declared) - set(table) - set(namespace))
        extra = sorted(set(table) - set(declared))
        raise ImportError(
            f"{package}.__all__ and its TYPE_CHECKING exports differ: "
            f"in __all__ only {missing}, exported only {extra}"
        )

    def __getattr__(name: str) -> object:
        try:
            module, attribute = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
