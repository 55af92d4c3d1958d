"""Parse speed of areal-alloc beside the reference implementation, measured in the same run.

Run: python benchmarks/bench_parse.py
The reference (areal's ``ModelAllocation.from_str``, which builds an Earley parser
per call) is loaded live from its published wheel (benchmarks/reference.py); the
targets are ratios against it, never constants. Figures are medians of repeated
runs (this machine is shared and noisy).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable

SIMPLE = "fsdp:d4t2"
HYBRID = "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)"


def median_us(fn: Callable[[], object], number: int, repeat: int = 15) -> float:
    runs = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e6


def uncached(spec: str) -> Callable[[], object]:
    """A full parse every call: no memo, and no record kept from an earlier run."""
    import areal_alloc._parse as parse_module
    from areal_alloc import ModelAllocation
    from areal_alloc.model import _cached

    setattr(parse_module, "lookup", lambda start, text: None)  # noqa: B010
    setattr(parse_module, "remember", lambda start, text, record: None)  # noqa: B010

    def run() -> object:
        _cached.cache_clear()
        return ModelAllocation.from_str(spec)

    return run


def seen_before(spec: str) -> Callable[[], object]:
    """A new process's first call for a string an earlier run parsed: no memo, no lark."""
    from areal_alloc import ModelAllocation
    from areal_alloc._cache import remember
    from areal_alloc._parse import parse_single
    from areal_alloc.model import _cached

    remember("single", spec, parse_single(spec))

    def run() -> object:
        _cached.cache_clear()
        return ModelAllocation.from_str(spec)

    return run


# Measure what an installed user sees: pip writes bytecode at install time, so
# let Python cache it (this workplace sets PYTHONDONTWRITEBYTECODE) and warm up.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def process_ms(code: str, runs: int = 11, env: dict[str, str] | None = None) -> float:
    env = env or ENV
    subprocess.run([sys.executable, "-c", code], check=True, env=env)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def row(label: str, value: float, unit: str, target: str, ok: bool) -> None:
    print(f"  {label:<52} {value:>10.2f} {unit:<3} {target:<16} {'ok' if ok else 'MISSED'}")


def main() -> int:
    from areal_alloc import ModelAllocation

    ModelAllocation.from_str(SIMPLE)  # build the parser once
    print("parse (median µs per call)")
    seen = median_us(seen_before(HYBRID), 300)
    simple = median_us(uncached(SIMPLE), 300)
    hybrid = median_us(uncached(HYBRID), 200)
    memo = median_us(lambda: ModelAllocation.from_str(SIMPLE), 20000)
    row(f"uncached {SIMPLE}", simple, "µs", "", True)
    row(f"uncached {HYBRID}", hybrid, "µs", "", True)
    row(f"memo hit {SIMPLE}", memo, "µs", "≤ 1 µs", memo <= 1)
    row("hybrid parsed in an earlier run (no memo, no lark)", seen, "µs", "", True)

    import importlib

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    reference = importlib.import_module("reference")  # benchmarks/reference.py
    module, label = reference.load()
    print(f"the reference, in this run: {label}")
    if module is None:
        print("  ratios not measured")
    else:
        theirs = module.ModelAllocation.from_str
        print("  (interleaved rounds: each ratio is the median of per-round ratios, so drift")
        print("   on this shared machine hits both sides of a round alike)")
        for spec, ours_fn, target in (
            (SIMPLE, uncached(SIMPLE), 575),
            (HYBRID, uncached(HYBRID), 250),
        ):
            ratios, refs, ourss = [], [], []

            def theirs_fn(spec: str = spec) -> object:
                return theirs(spec)

            for _ in range(9):
                ours_us = median_us(ours_fn, 200, repeat=3)
                ref_us = median_us(theirs_fn, 3, repeat=3)
                ratios.append(ref_us / ours_us)
                refs.append(ref_us)
                ourss.append(ours_us)
            ratio = statistics.median(ratios)
            row(f"reference {spec}", statistics.median(refs) / 1e3, "ms", "", True)
            row(f"ours {spec} (same rounds)", statistics.median(ourss), "µs", "", True)
            row(f"ratio reference / ours, {spec}", ratio, "×", f"≥ {target}×", ratio >= target)
        ref_simple = median_us(lambda: theirs(SIMPLE), 3, repeat=3)
        row("ratio reference / ours, simple, memo hit", ref_simple / memo, "×", "", True)

    print("start-up (median ms per fresh process)")
    leaked = subprocess.run(
        [sys.executable, "-c", "import sys, areal_alloc; print('lark' in sys.modules)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"  `import areal_alloc` imports lark: {leaked}  (target: False)")
    base = process_ms("import lark, omegaconf")
    parse = "import lark, omegaconf, areal_alloc; areal_alloc.ModelAllocation.from_str('fsdp:d4t2')"
    cold = process_ms(parse, env={**ENV, "AREAL_ALLOC_NO_PARSE_CACHE": "1"})
    seen = process_ms(parse)
    row("python -c 'import lark, omegaconf'", base, "ms", "", True)
    row("... + import areal_alloc + first parse (lark)", cold, "ms", "", True)
    row(
        "first-parse cost over importing dependencies",
        cold - base,
        "ms",
        "≤ 15 ms",
        cold - base <= 15,
    )
    row("... the same string, parsed in an earlier run", seen - base, "ms", "", True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
