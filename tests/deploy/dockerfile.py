"""Read the repository's Dockerfile: its instructions, stage by stage.

Just enough of the format for the deployment tests: comments and parser directives
skipped, backslash continuations joined, ``ARG`` defaults substituted into ``FROM``,
exec-form (JSON) arguments decoded. An instruction this module does not know is an
error, so a Dockerfile change the tests cannot follow fails them instead of passing
unread.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.repo_files import ROOT

DOCKERFILE = ROOT / "Dockerfile"

KNOWN = {
    "ARG", "FROM", "ENV", "WORKDIR", "COPY", "RUN", "VOLUME", "USER", "EXPOSE",
    "STOPSIGNAL", "HEALTHCHECK", "ENTRYPOINT", "CMD", "LABEL",
}  # fmt: skip


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str  # as written, continuations joined

    def exec_form(self) -> list[str]:
        """The arguments of an exec-form instruction (``["a", "b"]``)."""
        value = json.loads(self.args)
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError(f"not an exec-form list of strings: {self.args}")
        return value

    def words(self) -> list[str]:
        return shlex.split(self.args)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base} has no {keyword}"
        return found[-1]

    def env(self) -> dict[str, str]:
        """ENV values in order (``KEY=value`` pairs; ``$VAR`` left as written)."""
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for word in instruction.words():
                key, _, value = word.partition("=")
                values[key] = value
        return values


def logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    return lines


def parse(path: Path = DOCKERFILE) -> list[Stage]:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(path.read_text()):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword not in KNOWN:
            raise ValueError(f"{path.name}: instruction {keyword} is not understood here")
        rest = rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
            continue
        if keyword == "FROM":
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest.split()[0])
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
            continue
        stages[-1].instructions.append(Instruction(keyword, rest))
    return stages
