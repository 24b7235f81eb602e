"""What a cold start costs: each compiled kernel module's ``warm()`` with an empty numba
cache, and the functions it compiled more than once.

A fresh machine (a new clone, CI, an upgraded install) compiles every kernel before the
first action is served; later starts load them from numba's cache in well under a
second. Each module is compiled in a child process of its own with a fresh
``NUMBA_CACHE_DIR`` (so nothing is loaded from an earlier run), one module after the
other, and reports the seconds its ``warm()`` took and every function of the module
holding more than one compiled signature: a constant passed where a variable is passed
elsewhere compiles the callee once more (``tether.compiled``); two argument types (the
observations' float widths, read-only wire arrays) are real.

    python benchmarks/bench_compile.py [--kernels policy,position,replies] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

MODULES = {
    "policy": "tether.policy.kernel",
    "position": "tether.safety.position.kernel",
    "replies": "tether.serving.reply_kernel",
}

_CHILD = """
import importlib, json, sys, time
module = importlib.import_module(sys.argv[1])
start = time.perf_counter()
module.warm()
seconds = time.perf_counter() - start
twice = {}
for name in dir(module):
    fn = getattr(module, name)
    if hasattr(fn, "py_func") and len(fn.signatures) > 1:
        twice[name] = len(fn.signatures)
print(json.dumps({"seconds": seconds, "twice": twice}))
"""


def cold_warm(module: str) -> dict[str, object]:
    """One cold ``warm()`` of ``module`` in a child with an empty numba cache."""
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, module],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
    if done.returncode != 0:
        raise SystemExit(f"compiling {module} failed:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=",".join(MODULES))
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    names = args.kernels.split(",")
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        raise SystemExit(f"--kernels: unknown {unknown}; choose from {sorted(MODULES)}")
    print(
        f"# bench_compile: cold warm() per kernel module, median of {args.repeats}; "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print()
    print("| kernels | cold compile s | functions compiled more than once (signatures) |")
    print("|---|---|---|")
    total = 0.0
    for name in names:
        runs = [cold_warm(MODULES[name]) for _ in range(args.repeats)]
        seconds = statistics.median(float(str(r["seconds"])) for r in runs)
        total += seconds
        twice = runs[-1]["twice"]
        assert isinstance(twice, dict)
        listed = ", ".join(f"{k} ({v})" for k, v in sorted(twice.items())) or "none"
        print(f"| {name} | {seconds:.1f} | {listed} |")
    print(f"| all | {total:.1f} | |")


if __name__ == "__main__":
    main()
