"""Build the image's file tree the way the Dockerfile would, without a container engine.

A temporary directory stands for the image's ``/``. The build stage's instructions run
as written: its COPY sources are copied under the tree (what ``.dockerignore`` keeps
out — caches, egg-info — stays out), its RUN commands run in ``bash`` with the stage's
ENV, every absolute path there moved under the tree. The only edit: the PyTorch CPU
index (``--extra-index-url``) is dropped, because this machine finds the same pinned
CPU wheel in its local wheel directory and cannot reach that index. The final stage's
COPY instructions are carried out; its RUN (Debian packages, the user) needs root and
a Debian base, so it is listed in ``skipped`` instead of run, and so is ``tini`` when
the host has none: the entry point then starts at ``tether`` itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.dockerfile import Instruction, Stage, parse
from tests.deploy.repo_files import ROOT

_EXTRA_INDEX = re.compile(r"--extra-index-url[ =]\S+\s*")
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


@dataclass(frozen=True)
class ImageTree:
    root: Path  # the image's "/"
    env: dict[str, str]  # the final stage's environment, paths under root
    entrypoint: list[str]
    healthcheck: list[str]
    volume: Path
    skipped: tuple[str, ...]  # what the Dockerfile does that this build did not


def in_tree(root: Path, value: str) -> str:
    """``value`` with its absolute path(s) moved under ``root`` (``$VAR`` parts kept)."""
    parts = value.split(":")
    return ":".join(str(root / p.lstrip("/")) if p.startswith("/") else p for p in parts)


def stage_env(stage: Stage, root: Path, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    for key, value in stage.env().items():
        moved = in_tree(root, value)
        env[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), moved)
    return env


def copy_into(root: Path, workdir: Path, instruction: Instruction) -> None:
    words = [w for w in instruction.words() if not w.startswith("--")]
    *sources, dest = words
    target = workdir / dest if not dest.startswith("/") else root / dest.lstrip("/")
    for source in sources:
        src = ROOT / source
        if src.is_dir():
            shutil.copytree(src, target, ignore=_IGNORED, dirs_exist_ok=True)
        else:
            into = target / src.name if dest.endswith("/") else target
            into.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, into)


def build_tree(root: Path, *, timeout_s: float = 1500) -> ImageTree:
    build, final = parse()
    skipped: list[str] = []
    # The base image's python is the one on its PATH; here, this interpreter (3.11 too).
    host = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env = stage_env(build, root, host)
    workdir = root / build.last("WORKDIR").args.lstrip("/")
    workdir.mkdir(parents=True)
    for instruction in build.instructions:
        if instruction.keyword == "COPY":
            copy_into(root, workdir, instruction)
        elif instruction.keyword == "RUN":
            command = instruction.args
            dropped = _EXTRA_INDEX.findall(command)
            skipped += [f"build RUN option {d.strip()} (unreachable here)" for d in dropped]
            subprocess.run(
                ["bash", "-euo", "pipefail", "-c", _EXTRA_INDEX.sub("", command)],
                cwd=workdir,
                env=env,
                check=True,
                timeout=timeout_s,
            )
    for instruction in final.instructions:
        if instruction.keyword == "COPY":
            words = instruction.words()
            if "--from=build" in words:
                source, dest = words[-2:]
                assert source == dest, "the venv is not relocatable: copy it to its own path"
                assert (root / source.lstrip("/")).is_dir(), source
            else:
                copy_into(root, root, instruction)
        elif instruction.keyword == "RUN":
            skipped.append(f"final RUN {instruction.args[:60]}... (root and Debian only)")
    (volume,) = final.last("VOLUME").exec_form()
    (root / volume.lstrip("/")).mkdir(parents=True, exist_ok=True)
    entrypoint = [in_tree(root, a) if a.startswith("/") else a for a in _entrypoint(final)]
    if entrypoint[:2] == ["tini", "--"] and shutil.which("tini") is None:
        entrypoint = entrypoint[2:]
        skipped.append("tini (not installed here): the entry point starts at tether")
    health = final.last("HEALTHCHECK").args
    health_cmd = Instruction("CMD", health.split(" CMD ", 1)[1]).exec_form()
    return ImageTree(
        root=root,
        env=stage_env(final, root, dict(os.environ)),
        entrypoint=entrypoint,
        healthcheck=[in_tree(root, a) if a.startswith("/") else a for a in health_cmd],
        volume=root / volume.lstrip("/"),
        skipped=tuple(skipped),
    )


def _entrypoint(final: Stage) -> list[str]:
    return final.last("ENTRYPOINT").exec_form() + final.last("CMD").exec_form()
