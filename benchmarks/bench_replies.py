"""A batch's Control replies: encoded in one compiled call against a message per row.

``tether.serving.convert.encode_control_replies`` writes every row's ``ControlReply`` of a
batch as wire bytes in one numba call (``tether.serving.reply_kernel``); without it the
handler builds each reply as a protobuf message (``fill_action_response``) and grpc
serializes it. This measures both per row, at the batch sizes serving sees, for the
shipped arm's action size and a realistic verdict mix (half the rows passed, half
clipped on two joints), and is where ``tether.serving.inference.ENCODE_ROWS`` comes from.

    python benchmarks/bench_replies.py [--rows 1,2,4,8,16,32,64] [--repeat 3000]
"""

from __future__ import annotations

import argparse
import platform
import timeit

import numpy as np

from tether.policy.manifest import VersionInfo
from tether.safety.levels import DegradationLevel
from tether.safety.verdict import ActionSource, SafetyCheck, SafetyVerdict
from tether.serving import reply_kernel
from tether.serving.batcher import Batched
from tether.serving.convert import encode_control_replies, fill_action_response
from tether.serving.inference import ActionOutcome
from tether.v1 import policy_pb2 as pb

ACT_DIM = 7  # the shipped arm's joints
PASSED = SafetyVerdict(ActionSource.POLICY, SafetyCheck.NONE, 0.0, ())
CLIPPED = SafetyVerdict(ActionSource.CLIPPED, SafetyCheck.RATE, 0.01, (1, 3))


def per_row_us(rows: int, repeat: int) -> tuple[float, float]:
    """(µs per row encoded in one call, µs per row built and serialized as a message)."""
    rng = np.random.default_rng(rows)
    version = VersionInfo(id=3, name="pretrained", weights_sha256="ab" * 32)
    safe = rng.uniform(-1, 1, (rows, ACT_DIM)).astype(np.float32)
    proposed = rng.uniform(-1, 1, (rows, ACT_DIM)).astype(np.float32)
    log_probs = rng.normal(size=rows).astype(np.float32)
    verdicts = [PASSED if i % 2 else CLIPPED for i in range(rows)]
    steps = [(1000 + i, f"episode-{i:06d}") for i in range(rows)]
    levels = [DegradationLevel.NORMAL] * rows
    timings = np.tile(np.array([20_000, 150_000, 3_000, 400_000, rows], np.int64), (rows, 1))
    outcomes = [
        ActionOutcome(safe[i], proposed[i], float(log_probs[i]), version, verdicts[i], 3_000, 0)
        for i in range(rows)
    ]

    def encoded() -> None:
        encode_control_replies(steps, safe, proposed, log_probs, verdicts, levels, version, timings)

    def messages() -> None:
        for (index, episode), outcome in zip(steps, outcomes, strict=True):
            reply = pb.ControlReply(step_index=index, episode_id=episode)
            fill_action_response(reply.action, Batched(outcome, 20_000, 150_000, rows), 400_000)
            reply.SerializeToString()

    encoded()  # compiled (or loaded) before timing
    best = []
    for fn in (encoded, messages):
        best.append(min(timeit.repeat(fn, number=repeat, repeat=3)) / repeat / rows * 1e6)
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1,2,4,8,16,32,64")
    parser.add_argument("--repeat", type=int, default=3000)
    args = parser.parse_args()
    warm = reply_kernel.warm()
    print(
        f"# bench_replies: act_dim {ACT_DIM}, {platform.machine()}, Python "
        f"{platform.python_version()}, numba {'on' if reply_kernel.AVAILABLE else 'off'} "
        f"(warm-up {warm:.2f} s)\n"
    )
    print("| rows | encoded in one call, µs/row | message per row, µs/row | ratio |")
    print("|---|---|---|---|")
    for rows in (int(r) for r in args.rows.split(",")):
        encoded, messages = per_row_us(rows, args.repeat)
        print(f"| {rows} | {encoded:.2f} | {messages:.2f} | {messages / encoded:.2f} |")


if __name__ == "__main__":
    main()
