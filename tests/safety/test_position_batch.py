"""Many robots in one call decide exactly what one call per robot decides.

Two identical fleets of supervisors (base and tightened limits, compiled and Python
paths mixed) see the same rounds of inputs: one fleet one ``filter`` call per robot, the
other one ``filter_commands``/``filter_actions`` call per round. Every row must match its
single call to the bit (action bytes and verdict), and the fleets must stay in step
round after round (the state each call leaves behind is the same).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from safety import position_corpus as corpus
from safety.test_position_equivalence import same
from tether.safety.position import kernel
from tether.safety.position.batch import filter_actions, filter_commands


def fleet(rows: int, seed: int, kind: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(rows):
        factor = 0.5 if i % 5 == 4 else 1.0
        compiled = kernel.AVAILABLE and i % 7 != 3
        out.append(corpus.make_supervisor(kind, factor, compiled))
    rng.shuffle(out)
    return out


def rounds(rows: int, count: int, seed: int, kind: int) -> Any:
    """Per round: observations, proposals (rad or normalized), previous kinds, ages."""
    rng = np.random.default_rng(seed)
    states = [corpus._random_state(rng) for _ in range(rows)]
    for _ in range(count):
        obs, proposals, prev_kinds, ages = [], [], [], []
        for i in range(rows):
            q, v = states[i]
            q = np.clip(q + v * 0.02 + rng.normal(0.0, 0.01, 4), corpus.LOW, corpus.HIGH)
            v = np.clip(v + rng.normal(0.0, 0.3, 4), -corpus.VMAX, corpus.VMAX)
            states[i] = (q, v)
            obs.append(corpus._random_observation(rng, q, v))
            if kind == corpus.POSITION:
                proposals.append(corpus._random_command(rng, q, None))
            else:
                proposals.append(rng.uniform(-1.2, 1.2, 4).astype(np.float32))
                if rng.random() < 0.05:
                    proposals[-1][rng.integers(4)] = np.nan
            prev_kinds.append(corpus.PREV_NONE if rng.random() < 0.1 else corpus.PREV_LAST)
            ages.append(None if rng.random() < 0.9 else float(rng.choice([0.01, 0.5, np.nan])))
        yield obs, proposals, prev_kinds, ages


@pytest.mark.parametrize("kind", [corpus.POSITION, corpus.ACTIONS])
@np.errstate(over="ignore")
def test_a_batch_matches_one_call_per_robot(kind: int) -> None:
    rows = 64
    singles, batched = fleet(rows, 1, kind), fleet(rows, 1, kind)
    last_single: list[Any] = [None] * rows
    last_batch: list[Any] = [None] * rows
    compared = 0
    for obs, proposals, prev_kinds, ages in rounds(rows, 40, 2, kind):
        want = []
        for i in range(rows):
            prev = last_single[i] if prev_kinds[i] == corpus.PREV_LAST else None
            want.append(singles[i].filter(obs[i], proposals[i], prev, observation_age_s=ages[i]))
        previous = [
            last_batch[i] if prev_kinds[i] == corpus.PREV_LAST else None for i in range(rows)
        ]
        if kind == corpus.POSITION:
            got = filter_commands(batched, obs, proposals, previous, ages)
        else:
            got = filter_actions(batched, obs, np.stack(proposals), previous, ages)
        for i in range(rows):
            assert same(got[i], want[i]), (i, got[i], want[i])
            compared += 1
        last_single = [w[0] for w in want]
        last_batch = [g[0] for g in got]
    assert compared == 64 * 40


def test_a_supervisor_in_two_rows_is_refused() -> None:
    supervisor = corpus.make_supervisor(corpus.POSITION, 1.0, None)
    obs = corpus.observation(np.zeros(4), np.zeros(4))
    command = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="same supervisor in two rows"):
        filter_commands([supervisor, supervisor], [obs, obs], [command, command], [None, None])
