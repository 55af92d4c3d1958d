"""Speed of the inspection tools, printed side by side with their targets.

Run: python benchmarks/bench_inspect.py
Figures are medians of repeated runs (this machine is shared and noisy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from areal_alloc import ModelAllocation
from areal_alloc.rankgroups import all_rank_groups, order_refusal
from areal_alloc.search.layouts import LayoutConstraints, enumerate_layouts


def median_ms(fn: Callable[[], object], repeat: int = 9) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def row(label: str, value: float, target: float) -> None:
    verdict = "ok" if value <= target else "MISSED"
    print(f"  {label:<58} {value:8.2f} ms   ≤ {target:g} ms   {verdict}")


def main() -> int:
    print("rank groups: every attention and expert group of a 4096-rank layout")
    for spec in ("megatron:(attn:d32p4t8c4|ffn:d16p4t8e8)", "megatron:d64p8t8"):
        alloc = ModelAllocation.from_str(spec)
        assert alloc.parallel.world_size == 4096

        def groups(a: ModelAllocation = alloc) -> object:
            order_refusal.cache_clear()  # no memo: the full computation each time
            return all_rank_groups(a)

        row(spec, median_ms(groups), 50)
    print("layout search: every megatron layout for 1,024 GPUs")
    for label, constraints in (
        ("dense (d, t, p, c)", LayoutConstraints()),
        ("with experts (e)", LayoutConstraints(experts=True)),
        ("with experts and hybrid attn/ffn (etp)", LayoutConstraints(hybrid=True)),
    ):
        count = len(enumerate_layouts("megatron", 1024, constraints))

        def search(c: LayoutConstraints = constraints) -> object:
            return enumerate_layouts("megatron", 1024, c)

        row(f"{label}: {count} layouts", median_ms(search), 100)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
