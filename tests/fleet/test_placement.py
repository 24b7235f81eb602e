"""What the learner actor asks Ray for: a GPU only when the cluster has one (or it must)."""

from __future__ import annotations

import pytest

from tether.fleet.errors import FleetError
from tether.fleet.placement import learner_resources


@pytest.mark.parametrize(
    ("cluster", "mode", "gpus"),
    [
        ({"CPU": 2.0}, "auto", 0.0),
        ({"CPU": 16.0, "GPU": 1.0}, "auto", 1.0),
        ({"CPU": 16.0, "GPU": 8.0}, "none", 0.0),
        ({"CPU": 16.0, "GPU": 1.0}, "one", 1.0),
    ],
)
def test_the_learner_asks_for_a_gpu_only_where_there_is_one(
    cluster: dict[str, float], mode: str, gpus: float
) -> None:
    assert learner_resources(cluster, mode)["num_gpus"] == gpus


def test_requiring_a_gpu_on_a_cluster_without_one_says_what_to_change() -> None:
    with pytest.raises(FleetError, match="learner_gpus is 'one' but the cluster has no GPU"):
        learner_resources({"CPU": 2.0}, "one")
