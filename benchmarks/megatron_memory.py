"""Our memory estimate side by side with Megatron-LM's own theoretical memory report.

Run: python benchmarks/megatron_memory.py /path/to/Megatron-LM

It loads ``megatron/training/theoretical_memory_usage.py`` from that checkout
(its two helpers from ``.utils`` stubbed: no hybrid models, print to stdout),
runs it on the configurations in ``tests/estimate/test_megatron_anchors.py``, and prints
its figures next to ours. Those figures are what the accuracy test holds, with
the Megatron-LM commit they came from. Where the two models differ on purpose
(we count the last stage's float32 logits and the reserve, Megatron's report
does not), only the terms both count are compared.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ANCHORS_FILE = ROOT / "tests" / "plan" / "test_megatron_anchors.py"


def load_anchors() -> Any:
    """The anchors module of the tests (configurations, and our side of the comparison)."""
    spec = importlib.util.spec_from_file_location("megatron_anchors", ANCHORS_FILE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {ANCHORS_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["megatron_anchors"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def load_megatron(checkout: Path) -> Any:
    file = checkout / "megatron" / "training" / "theoretical_memory_usage.py"
    package = types.ModuleType("megatron_report")
    package.__path__ = [str(file.parent)]
    utils = types.ModuleType("megatron_report.utils")
    utils.is_hybrid_model = lambda args: False  # type: ignore[attr-defined]
    utils.print_rank_0 = lambda *a, **k: None  # type: ignore[attr-defined]
    sys.modules["megatron_report"] = package
    sys.modules["megatron_report.utils"] = utils
    spec = importlib.util.spec_from_file_location("megatron_report.tmu", file)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    checkout = Path(sys.argv[1])
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    report = load_megatron(checkout)
    anchors = load_anchors()
    print(f"Megatron-LM {commit or '(not a git checkout)'}")
    print(f"{'anchor':34s} {'term':22s} {'Megatron MB':>13s} {'ours MB':>13s} {'diff':>8s}")
    for anchor in anchors.ANCHORS:
        args = anchor.megatron_args()
        weights = report.compute_weight_and_optimizer_memory(args) / 2**20
        activations = report.compute_activation_memory(args, anchor.micro_batches) / 2**20
        mine = anchors.ours(anchor)
        rows = [("weights+optimizer", weights, mine["weights+optimizer"])]
        if anchor.compare_activations:
            rows.append(("activations", activations, mine["activations"]))
        for term, theirs, ours_mb in rows:
            print(
                f"{anchor.name:34s} {term:22s} {theirs:13.2f} {ours_mb:13.2f} "
                f"{(ours_mb / theirs - 1) * 100:+7.2f}%"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
