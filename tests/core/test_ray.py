"""Placement groups on a real local Ray cluster with simulated 8-GPU nodes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from areal_alloc import AllocationError, validate
from areal_alloc.ray_placement import create_placement_groups, placement_group_specs

if os.environ.get("AREAL_ALLOC_REQUIRE_RAY"):
    import ray
else:
    ray = pytest.importorskip("ray")

LABELS = ["areal_test_node_0", "areal_test_node_1"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False},
    )
    for label in LABELS:
        c.add_node(num_cpus=1, num_gpus=8, resources={label: 1.0})
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def _label_of_node() -> dict[str, str]:
    out = {}
    for node in ray.nodes():
        for label in LABELS:
            if label in node.get("Resources", {}):
                out[node["NodeID"]] = label
    return out


def plan_2x8() -> Any:
    return validate(
        {
            "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
            "rollout": {"backend": "sglang:d3t2"},
            "teacher": {"rollout": {"backend": "vllm:d1t4"}},
            "actor": {"backend": "fsdp:d4"},
            "ref": {
                "backend": "",
                "scheduling_strategy": {"type": "colocation", "target": "actor"},
            },
        }
    )


def test_specs_follow_the_plan() -> None:
    specs = placement_group_specs(plan_2x8(), LABELS)
    assert [(s.name, s.node, s.gpus) for s in specs] == [
        ("rollout/instance0", 0, (0, 1)),
        ("rollout/instance1", 0, (2, 3)),
        ("rollout/instance2", 0, (4, 5)),
        ("teacher/instance0", 1, (0, 1, 2, 3)),
        ("actor/node1", 1, (4, 5, 6, 7)),
    ]
    assert specs[0].bundles == [{"GPU": 1.0, "areal_test_node_0": 0.001}] * 2


def test_every_bundle_lands_on_the_planned_node(cluster: Any) -> None:
    from ray.util.placement_group import placement_group_table, remove_placement_group

    specs = placement_group_specs(plan_2x8(), LABELS)
    groups = create_placement_groups(specs, timeout_s=60)
    labels = _label_of_node()
    try:
        for spec, group in zip(specs, groups, strict=True):
            table = placement_group_table(group)
            assert table["state"] == "CREATED"
            nodes = {labels[n] for n in table["bundles_to_node_id"].values()}
            assert nodes == {LABELS[spec.node]}, spec.name
    finally:
        for group in groups:
            remove_placement_group(group)


def test_a_plan_that_does_not_fit_stays_pending_and_is_reported(cluster: Any) -> None:
    # planned for 3 nodes; the cluster has 2, and node 1 lacks the GPUs of both
    plan = validate(
        {
            "cluster": {"n_nodes": 3, "n_gpus_per_node": 8},
            "rollout": {"backend": "sglang:d2t4"},
            "actor": {"backend": "fsdp:d16"},
        }
    )
    specs = placement_group_specs(plan, [LABELS[0], LABELS[1], LABELS[1]])
    with pytest.raises(AllocationError) as info:
        create_placement_groups(specs, timeout_s=5)
    # actor/node1 and actor/node2 both ask for node 1's 8 GPUs: Ray grants one of them,
    # whichever it schedules first, and the other stays pending
    assert info.value.message in {
        "1 placement group(s) still pending after 5 s, so the cluster cannot hold this plan: "
        f"actor/node{n}"
        for n in (1, 2)
    }
    # everything created was removed again (Ray frees resources asynchronously)
    deadline = time.monotonic() + 30
    while ray.available_resources().get("GPU") != 16.0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("GPU") == 16.0


def test_not_enough_node_resources_given() -> None:
    with pytest.raises(AllocationError, match="spans 2 nodes but 1 node resources"):
        placement_group_specs(plan_2x8(), LABELS[:1])
