"""Speed of the file reader at its limits, printed side by side with the one-second promise.

Run: python benchmarks/bench_files.py

Each case is an input at (or past) a limit of ``areal_alloc.files``; each must be
answered, or refused in one line, well under a second:

1. a 200 MB config.json (refused from its size, never read);
2. a config.json of 4 MB, just under the limit (read and parsed);
3. the same config.json read by five engines (read once per process);
4. a YAML alias bomb of 10⁹ nodes (refused from the parser's events, nothing built);
5. a YAML of 9,000 nodes, just under the node limit, composed through Hydra;
6. a JSON file nesting 2,000,000 deep, and one 400,000 deep with no long run of
   openers (``[[],[[],…``: its brackets are counted one by one); both refused.
Figures are medians of repeated runs (this machine is shared and noisy).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from areal_alloc import files
from areal_alloc.compose import compose_file
from areal_alloc.errors import AllocationError


def _median(function: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        files._MEMO.clear()  # each run reads afresh
        start = time.perf_counter()
        with contextlib.suppress(AllocationError):  # a refusal is an answer too
            function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="bench-files-"))
    huge = folder / "huge.json"
    with huge.open("wb") as f:
        f.truncate(200 * 2**20)
    big = folder / "big.json"
    labels = {str(i): f"label {i}" for i in range(files.CONFIG_JSON.limit // 24)}
    text = json.dumps({"num_hidden_layers": 24, "id2label": labels})
    big.write_text(text[: files.CONFIG_JSON.limit - 100].rsplit(",", 1)[0] + "}}")
    bomb = folder / "bomb.yaml"
    bomb.write_text(
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
        + "".join(
            f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n"
            for a, b in zip("abcdefgh", "bcdefghi", strict=True)
        )
    )
    near = folder / "near.yaml"
    near.write_text(
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        + "".join(f"k{i}: {i}\n" for i in range((files.MAX_YAML_NODES - 1000) // 2))
    )
    half = files.CONFIG_JSON.limit // 2
    deep = folder / "deep.json"
    deep.write_text("[" * half + "]" * half)
    spread = folder / "spread.json"  # no run of openers to find: counted one by one
    spread.write_text("[[]," * (half // 5) + "0" + "]" * (half // 5))

    def five_engines() -> None:
        for _ in range(5):
            files.read_json(big)

    cases = [
        ("200 MB config.json, refused", lambda: files.read_json(huge), 21),
        ("4 MB config.json, read", lambda: files.read_json(big), 5),
        ("4 MB config.json, five engines", five_engines, 5),
        ("YAML alias bomb (10⁹ nodes), refused", lambda: files.read_yaml(bomb), 21),
        (
            f"YAML of {files.MAX_YAML_NODES - 1000:,} nodes, composed",
            lambda: compose_file(str(near)),
            3,
        ),
        ("JSON nesting 2,000,000 deep, refused", lambda: files.read_json(deep), 3),
        ("JSON nesting 400,000 deep, no run, refused", lambda: files.read_json(spread), 3),
    ]
    print(f"{'case':45} {'median':>10}  target")
    for name, function, runs in cases:
        seconds = _median(function, runs)
        print(f"{name:45} {seconds * 1000:8.1f} ms  ≤ 1000 ms {'ok' if seconds <= 1 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
