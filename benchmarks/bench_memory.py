"""Speed of the memory estimates, printed side by side with their targets.

Run: python benchmarks/bench_memory.py

1. The whole plan with memory for a 5-engine config (rollout, teacher, actor,
   critic, ref; every engine's model named, a GPU named), after imports and a
   warm-up: target ≤ 10 ms.
2. Listing the layouts that fit for 1,024 GPUs (megatron, Qwen3-30B-A3B on
   H100-80GB, the model's shape rules applied): target ≤ 200 ms.
Figures are medians of repeated runs (this machine is shared and noisy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from areal_alloc.plan import plan_config
from areal_alloc.search.fitting import fitting_layouts

CONFIG: dict[str, Any] = {
    "cluster": {"n_nodes": 4, "n_gpus_per_node": 8, "gpu": "H100-80GB"},
    "rollout": {"backend": "sglang:d4t2", "max_concurrent_rollouts": 256},
    "teacher": {"backend": "vllm:d1t8", "path": "Qwen/Qwen3-32B"},
    "actor": {
        "backend": "megatron:d2p2t2",
        "path": "Qwen/Qwen3-8B",
        "gradient_checkpointing": True,
        "mb_spec": {"max_tokens_per_mb": 16384},
        "optimizer": {"type": "adam"},
    },
    "critic": {"backend": "fsdp:d8", "path": "Qwen/Qwen3-4B", "gradient_checkpointing": True},
    "ref": {"backend": "", "scheduling_strategy": {"type": "colocation", "target": "actor"}},
    "sglang": {"context_length": 32768},
}


def _median(function: Callable[[], object], runs: int) -> float:
    function()  # warm-up: lazy imports, caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    plan = plan_config(CONFIG)
    assert all(e.memory is not None for e in plan.engines if e.active)
    plan_s = _median(lambda: plan_config(CONFIG), 51)
    layouts = fitting_layouts("megatron", 1024, model="Qwen3-30B-A3B", gpu="H100-80GB", tokens=8192)
    layouts_s = _median(
        lambda: fitting_layouts(
            "megatron", 1024, model="Qwen3-30B-A3B", gpu="H100-80GB", tokens=8192
        ),
        11,
    )
    print("memory estimates (median)")
    print(
        f"  plan with memory, 5 engines              {plan_s * 1e3:8.2f} ms   target ≤ 10 ms    "
        f"{'ok' if plan_s <= 0.010 else 'MISSED'}"
    )
    print(
        f"  layouts that fit, megatron 1,024 GPUs    {layouts_s * 1e3:8.2f} ms   target ≤ 200 ms   "
        f"{'ok' if layouts_s <= 0.200 else 'MISSED'}   ({len(layouts)} fit)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
