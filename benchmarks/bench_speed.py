"""Speed of ranking layouts and of `suggest`, printed side by side with their targets.

Run: python benchmarks/bench_speed.py

1. Ranking every megatron layout of 1,024 GPUs that fits (Qwen3-30B-A3B on
   H100-80GB: memory and step time for each): target ≤ 1 s.
2. `suggest` for 256 GPUs with rollout, actor and ref (Qwen3-8B on H100-80GB):
   target ≤ 2 s; and for 4,096 GPUs, where the splits are searched (no target).
Figures are medians of repeated runs (this machine is shared and noisy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.estimate.execution import TrainingSettings
from areal_alloc.estimate.system import Hardware
from areal_alloc.search.layouts import LayoutConstraints
from areal_alloc.search.ranking import ranked_layouts
from areal_alloc.search.split import RunShape, suggest


def _median(function: Callable[[], object], runs: int) -> float:
    function()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    gpu = find_gpu("H100-80GB")
    hardware = Hardware.from_gpu(gpu, 8)
    moe, dense = find_model("Qwen3-30B-A3B"), find_model("Qwen3-8B")
    settings = TrainingSettings(tokens_per_micro_batch=8192)

    def rank() -> int:
        return len(
            ranked_layouts(
                "megatron",
                1024,
                LayoutConstraints(gpus_per_node=8),
                moe,
                gpu.memory_bytes,
                hardware,
                tokens_per_step=1 << 22,
                sequence_length=8192,
                training=settings,
            )
        )

    def propose(gpus: int = 256) -> int:
        return len(
            suggest(
                dense,
                gpus,
                gpu.memory_bytes,
                hardware,
                RunShape.of(batch=1024, prompt_len=1024, gen_len=8192, ref=True),
                training=TrainingSettings(tokens_per_micro_batch=16384, recompute="full"),
            )
        )

    def propose_large() -> int:
        return propose(4096)  # 511 whole-node splits: searched, not tried one by one

    ranked = rank()
    rank_s = _median(rank, 5)
    proposals = propose()
    suggest_s = _median(propose, 5)
    large = propose_large()
    large_s = _median(propose_large, 5)
    print("ranking and suggesting (median of 5)")
    print(
        f"  rank megatron layouts of 1,024 GPUs      {rank_s * 1e3:8.1f} ms   target ≤ 1 s     "
        f"{'ok' if rank_s <= 1.0 else 'MISSED'}   ({ranked} layouts fit)"
    )
    print(
        f"  suggest for 256 GPUs (rollout/actor/ref) {suggest_s * 1e3:8.1f} ms   target ≤ 2 s     "
        f"{'ok' if suggest_s <= 2.0 else 'MISSED'}   ({proposals} proposals)"
    )
    print(
        f"  suggest for 4,096 GPUs (searched splits) {large_s * 1e3:8.1f} ms   (no target)     "
        f"({large} proposals)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
