"""Hydra-side costs of areal-alloc, printed side by side with their targets.

Run: python benchmarks/bench_hydra.py

1. Sweep validation: for a 100-job layout sweep, the time our hook spends
   checking every job, against what Hydra itself spends composing every job
   before the first launch (BasicSweeper.validate_batch_is_legal). Target ≤ 10 %.
2. Start-up: a trivial Hydra app run on its experiment config without the hook
   line, with ``- areal_alloc/validate`` on a config not validated before (the full
   check), and with it on the config validated on an earlier run (the verdict cache's
   fast path, areal_alloc/_verdicts.py), in CPU seconds of the process (user +
   system), interleaved rounds. Target: the cached run ≤ 5 % more than the plain one.
   BENCH_RUNS sets the rounds (default 41); BENCH_STARTUP_ONLY=1 skips the sweep.
Figures are medians (this machine is shared and noisy).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

JOBS = 100


def _multirun_config(conf_dir: Path) -> tuple[Any, list[str]]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    # 100 jobs: 50 actor layouts × 2 rollout layouts
    actors = ",".join(f"fsdp:d{d}" for d in range(1, 51))
    overrides = [f"actor.backend={actors}", "rollout.backend=sglang:d2t4,sglang:d4t2"]
    GlobalHydra.instance().clear()
    initialize_config_dir(config_dir=str(conf_dir), version_base="1.3")
    hydra = GlobalHydra.instance().hydra
    assert hydra is not None
    config = hydra.compose_config(
        "config", overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False
    )
    return config, overrides


def sweep_overhead() -> tuple[float, float]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import HydraContext

    from areal_alloc.sweep import check_sweep

    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp)
        (conf / "config.yaml").write_text(
            textwrap.dedent(
                """\
                defaults:
                  - areal_alloc/validate
                  - _self_
                cluster: {n_nodes: 16, n_gpus_per_node: 8}
                rollout: {backend: sglang:d2t4, max_concurrent_rollouts: 64}
                actor: {backend: fsdp:d4, kl_ctl: 0.1, optimizer: {lr: 1e-5}}
                ref:
                  backend: ""
                  scheduling_strategy: {type: colocation, target: actor}
                critic: {backend: fsdp:d2t2}
                teacher: {backend: vllm:d1t4}
                """
            )
        )
        config, overrides = _multirun_config(conf)
        # imported after Hydra's plugin scan, which executes the module again
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()
        sweeper = BasicSweeper(max_batch_size=None)
        sweeper.config = config
        sweeper.hydra_context = HydraContext(config_loader=loader, callbacks=None)  # type: ignore[arg-type]
        parsed = OverridesParser.create().parse_overrides(overrides)
        batch = BasicSweeper.split_arguments(parsed, None)[0]
        assert len(batch) == JOBS
        hydra_times, ours_times = [], []
        for _ in range(5):
            start = time.perf_counter()
            sweeper.validate_batch_is_legal(batch)
            hydra_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            checks = check_sweep(config)
            ours_times.append(time.perf_counter() - start)
            assert len(checks) == JOBS
        return statistics.median(hydra_times), statistics.median(ours_times)


TRIVIAL_APP = """\
import hydra
@hydra.main(version_base="1.3", config_path="conf", config_name=None)
def app(cfg):
    pass
app()
"""

EXPERIMENT = """\
cluster: {n_nodes: 2, n_gpus_per_node: 8}
rollout: {backend: "sglang:d2t4"}
actor: {backend: "fsdp:d4t2"}
ref: {backend: "", scheduling_strategy: {type: colocation, target: actor}}
"""


def _cpu_seconds(command: list[str], cwd: str, env: dict[str, str]) -> float:
    """User + system CPU seconds of one run of ``command`` (steadier than wall time)."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{command} failed with {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def _code_identity() -> list[object]:
    """What of the package's code the verdict's key holds (a change: every verdict misses)."""
    from areal_alloc import _verdicts

    return _verdicts._code_identity()


def startup(runs: int = 41) -> dict[str, tuple[float, float]]:
    """CPU seconds of a trivial Hydra app, three ways, in interleaved rounds.

    ``plain``: the experiment without the hook line; ``first``: with it, on a config
    the hook has not validated before (a new value each round: the full check, then
    its verdict kept); ``cached``: with it, on the config validated before (the fast
    path). Returns, for each way, the median CPU seconds and the median of the
    per-round ratios to ``plain`` (a burst of load on this shared machine hits the
    three runs of a round alike).
    """
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "app.py").write_text(TRIVIAL_APP)
        conf = Path(tmp, "conf")
        conf.mkdir()
        Path(conf, "without.yaml").write_text(EXPERIMENT)
        Path(conf, "with.yaml").write_text(
            "defaults:\n  - areal_alloc/validate\n  - _self_\n" + EXPERIMENT
        )
        extra = [
            "hydra.run.dir=.",
            "hydra.output_subdir=null",
            "hydra/job_logging=none",
            "hydra/hydra_logging=none",
        ]
        # as installed: bytecode cached (this workplace sets PYTHONDONTWRITEBYTECODE);
        # a cache folder of its own, so the user's verdicts are neither used nor changed
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["XDG_CACHE_HOME"] = str(Path(tmp, "cache"))

        def command(config: str, value: str) -> list[str]:
            # a key of the reference's own (a run's trial name), so the strict-key check
            # takes it and the config stays the reference's
            trial = f"+trial_name=round{value}"
            return [sys.executable, "app.py", "--config-name", config, *extra, trial]

        ways: dict[str, Callable[[int], list[str]]] = {
            "plain": lambda i: command("without", str(i)),
            "first": lambda i: command("with", str(i)),  # a config never validated before
            "cached": lambda i: command("with", "cached"),
        }
        for make in ways.values():  # warm-up: bytecode, parse cache, the cached verdict
            _cpu_seconds(make(-1), tmp, env)
        times: dict[str, list[float]] = {way: [] for way in ways}
        missed = 0
        for i in range(runs):  # interleaved, so drift hits every way alike
            before = _code_identity()
            for way, make in ways.items():
                times[way].append(_cpu_seconds(make(i), tmp, env))
            if _code_identity() != before:
                # a file of the package changed during the round (another edit of the
                # tree): its code is part of the verdict's key, so the cached run missed.
                # (Not the verdict file's mtime: a hit rewrites the file too when its
                # verdict had aged into the older half, the MRU refresh; that is part
                # of a hit's cost and stays in the figures.)
                missed += 1
                for kept in times.values():
                    kept.pop()
        if not times["plain"]:
            raise SystemExit("every cached run missed: is the package being edited?")
        found = {
            way: (
                statistics.median(times[way]),
                statistics.median(w / p for w, p in zip(times[way], times["plain"], strict=True)),
            )
            for way in ways
        }
        found["missed"] = (float(missed), float(len(times["plain"])))
        return found


def main() -> int:
    if not os.environ.get("BENCH_STARTUP_ONLY"):
        _sweep()
    _startup()
    return 0


def _sweep() -> None:
    hydra_s, ours_s = sweep_overhead()
    ratio = ours_s / hydra_s
    print(f"sweep of {JOBS} jobs (median of 5)")
    print(f"  Hydra composes every job before launch    {hydra_s * 1e3:9.1f} ms")
    print(f"  areal-alloc checks every job              {ours_s * 1e3:9.1f} ms")
    print(
        f"  added to Hydra's multirun start-up        {ratio * 100:9.1f} %    target ≤ 10 %   "
        f"{'ok' if ratio <= 0.10 else 'MISSED'}"
    )


def _startup() -> None:
    runs = int(os.environ.get("BENCH_RUNS", "41"))
    found = startup(runs)
    plain = found["plain"][0]
    print(
        f"trivial Hydra app start-up, CPU seconds (user + system; median of {runs:.0f} "
        f"interleaved rounds; ratio: median of the per-round ratios to the plain app)"
    )
    labels = {
        "plain": "its experiment without the hook line  ",
        "first": "+ hook, a config not validated before ",
        "cached": "+ hook, the config validated before   ",
    }
    missed, kept = found["missed"]
    if missed:
        print(f"  ({missed:.0f} rounds dropped: the cached run missed; {kept:.0f} kept)")
    for way, label in labels.items():
        cpu, ratio = found[way]
        more = ratio - 1
        line = f"  {label}{cpu * 1e3:8.1f} ms"
        if way != "plain":
            line += (
                f"   {more * 100:+6.1f} % (ratio of the medians {(cpu / plain - 1) * 100:+.1f} %, "
                f"{(cpu - plain) * 1e3:+.1f} ms)"
            )
        if way == "cached":
            line += f"    target ≤ 5 %    {'ok' if more <= 0.05 else 'MISSED'}"
        print(line)


if __name__ == "__main__":
    raise SystemExit(main())
