"""Host memory and CPUs per node (areal_alloc.estimate.host): the host's figures and their
sources, each term, the verdicts (refused over a given host, warned over a detected one or
within 10 %), and the plan's text and JSON."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from areal_alloc import settings as settings_module
from areal_alloc.cli.render import host_lines
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate.host import ray_memory
from areal_alloc.plan import Plan, plan_config
from areal_alloc.settings import GIB, Settings, Sourced
from tests.conftest import MainCli

TIMEOUT = (
    '"Ray placement group timeout, please check if the resource requirement for your '
    'experiment exceeds the available resources in the cluster"'
)


def _ray(mem: int, gpus: int = 8, n_nodes: int = 2, cpu: int | None = None) -> dict[str, Any]:
    """A Ray run of a rollout and an actor on their own nodes, each spec ``mem`` GB per GPU."""
    spec: dict[str, Any] = {"gpu": 1, "mem": mem}
    if cpu is not None:
        spec["cpu"] = cpu
    return {
        "cluster": {"n_nodes": n_nodes, "n_gpus_per_node": gpus},
        "scheduler": {"type": "ray"},
        "rollout": {"backend": f"sglang:d{gpus}", "scheduling_spec": [spec]},
        "actor": {"backend": f"fsdp:d{gpus * (n_nodes - 1)}", "scheduling_spec": [spec]},
    }


#: A colocated Qwen3-8B GRPO run on one 8-GPU node with enable_offload and disk updates.
OFFLOADED: dict[str, Any] = {
    "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
    "enable_offload": True,
    "rollout": {"backend": "sglang:d2t4"},
    "actor": {
        "backend": "fsdp:d8",
        "path": "Qwen/Qwen3-8B",
        "optimizer": {"type": "adam"},
        "gradient_checkpointing": True,
        "mb_spec": {"max_tokens_per_mb": 4096},
        "weight_update_mode": "disk",
        "scheduling_strategy": {"type": "colocation", "target": "rollout"},
    },
    "sglang": {"model_path": "Qwen/Qwen3-8B"},
    "train_dataset": {"batch_size": 64, "max_length": 1024},
    "gconfig": {"n_samples": 4, "max_new_tokens": 1024},
}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(base)
    for dotted, value in changes.items():
        node = cfg
        *parents, key = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
    return cfg


def _plan(cfg: dict[str, Any], **flags: object) -> Plan:
    given = {"gpu": "H100-80GB", **flags}
    return plan_config(cfg, settings=Settings.from_sources(flags=given, environ={}, detect=False))


def _refusal(cfg: dict[str, Any], **flags: object) -> str:
    with pytest.raises(AllocationValidationError) as caught:
        _plan(cfg, **flags)
    return caught.value.message


# --- the host's figures -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "hook", "environ", "memory", "cpus"),
    [
        (
            {"host_memory_gib": "512", "host_cpus": 64},
            {},
            {},
            (512 * GIB, "--host-memory-gib"),
            (64, "--host-cpus"),
        ),
        (
            {},
            {"host_memory_gib": 256.5},
            {},
            (int(256.5 * GIB), "hydra.callbacks.areal_alloc.host_memory_gib"),
            None,
        ),
        (
            {},
            {},
            {"AREAL_ALLOC_HOST_MEMORY_GIB": "1024", "AREAL_ALLOC_HOST_CPUS": "96"},
            (1024 * GIB, "AREAL_ALLOC_HOST_MEMORY_GIB"),
            (96, "AREAL_ALLOC_HOST_CPUS"),
        ),
        # a flag wins over the hook and the environment
        (
            {"host_cpus": 8},
            {"host_cpus": 16},
            {"AREAL_ALLOC_HOST_CPUS": "32"},
            None,
            (8, "--host-cpus"),
        ),
    ],
)
def test_the_host_comes_from_flags_the_hook_or_the_environment(
    flags: dict[str, object],
    hook: dict[str, object],
    environ: dict[str, str],
    memory: tuple[int, str] | None,
    cpus: tuple[int, str] | None,
) -> None:
    found = Settings.from_sources(flags=flags, hook=hook, environ=environ, detect=False).host()
    assert found == (
        Sourced(*memory) if memory else None,
        Sourced(*cpus) if cpus else None,
    )


def test_the_host_is_never_a_key_of_the_experiment() -> None:
    cfg = {"cluster": {"n_nodes": 1, "n_gpus_per_node": 8, "host_memory_gib": 64}}
    assert Settings(detect=False).resolve(cfg).host_memory is None


def test_detection_reads_this_machine_and_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = (Sourced(24 * GIB, "/proc/meminfo"), Sourced(4, "os.sched_getaffinity"))
    monkeypatch.setattr(settings_module, "detect_host", lambda: seen)
    on = Settings.from_sources(environ={})
    assert on.host() == seen
    assert seen[0].origin == "this machine's (/proc/meminfo), assumed to be a node"
    assert Settings.from_sources(environ={"AREAL_ALLOC_DETECT": "0"}).host() == (None, None)
    # a given figure wins over the detected one, the other is still detected
    given = Settings.from_sources(flags={"host_cpus": 64}, environ={}).host()
    assert given == (seen[0], Sourced(64, "--host-cpus"))


def test_this_machine_is_read_from_proc_meminfo() -> None:
    settings_module.detect_host.cache_clear()
    memory, cpus = settings_module.detect_host()
    if Path("/proc/meminfo").is_file():
        first = Path("/proc/meminfo").read_text().splitlines()[0].split()
        assert memory == Sourced(int(first[1]) * 1024, "/proc/meminfo")
    assert cpus is not None
    assert cpus.value >= 1


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"AREAL_ALLOC_HOST_MEMORY_GIB": "lots"},
            "AREAL_ALLOC_HOST_MEMORY_GIB='lots': must be a number",
        ),
        (
            {"AREAL_ALLOC_HOST_CPUS": "0"},
            "AREAL_ALLOC_HOST_CPUS='0': must be an integer from 1 to 1,048,576",
        ),
    ],
)
def test_a_bad_host_figure_names_its_source(environ: dict[str, str], message: str) -> None:
    with pytest.raises(AllocationError) as caught:
        Settings.from_sources(environ=environ, detect=False).host()
    assert caught.value.message.startswith(message)


# --- the scheduler's requests (B1, B3) ----------------------------------------------------


def test_ray_mem_of_128_per_gpu_on_8_gpu_nodes_of_512_gib_is_refused() -> None:
    assert ray_memory(512 * GIB) == int(512 * GIB * 0.7) + 1  # the store takes int(30 %)
    assert _refusal(_ray(128), host_memory_gib=512) == (
        "(1) node 0: the scheduler is asked for 1024.0 GiB = rollout.scheduling_spec[0].mem "
        "1024.0 GiB (128 GB × 8 GPUs), over the 358.4 GiB Ray offers as its memory resource "
        "on a node of 512.0 GiB (from --host-memory-gib; the RAM less the object store's 30%, "
        "at most 200 GB); the placement group never forms and the scheduler stops: "
        f"{TIMEOUT}; set rollout.scheduling_spec[0].mem to 44 GB per GPU or less, or use "
        "nodes with more memory "
        "(2) node 1: the scheduler is asked for 1024.0 GiB = actor.scheduling_spec[0].mem "
        "1024.0 GiB (128 GB × 8 GPUs), over the 358.4 GiB Ray offers as its memory resource "
        "on a node of 512.0 GiB (from --host-memory-gib; the RAM less the object store's 30%, "
        "at most 200 GB); the placement group never forms and the scheduler stops: "
        f"{TIMEOUT}; set actor.scheduling_spec[0].mem to 44 GB per GPU or less, or use "
        "nodes with more memory"
    )


@pytest.mark.parametrize(
    ("cfg", "host", "expected"),
    [
        # AReaL#14: "Required: … 107.42 GB memory. Available: … 39.60 GB memory" (Ray's GiB):
        # one 1-GPU node whose Ray memory resource is 39.6 GiB (56.6 GiB of RAM)
        (_ray(108, gpus=1), 56.6, "over the 39.6 GiB Ray offers"),
        # AReaL#120: 4 workers asking 351.56 GiB where Ray offers 255.89 GiB (a 365.6 GiB node)
        (_with(_ray(88, gpus=4)), 365.6, "over the 255.9 GiB Ray offers"),
        # the same run under Slurm: its --mem against the node's RAM
        (
            _with(_ray(88, gpus=4), scheduler__type="slurm"),
            300,
            "over the node's 300.0 GiB (from --host-memory-gib); Slurm cannot give one node that "
            "much: the job is refused or never starts",
        ),
    ],
)
def test_the_requests_the_users_hit_are_refused(
    cfg: dict[str, Any], host: float, expected: str
) -> None:
    assert expected in _refusal(cfg, host_memory_gib=host)


def test_slurm_asks_the_node_itself_and_local_asks_nothing() -> None:
    slurm = _with(_ray(40), scheduler__type="slurm")
    assert _plan(slurm, host_memory_gib=400).host is not None  # 320 GiB of 400: fits
    local = _with(_ray(400), scheduler__type="local")
    plan = _plan(local, host_memory_gib=64)  # mem is not read by the local scheduler
    assert plan.host is not None
    assert plan.host.groups == ()


def test_cpus_over_the_node_are_refused() -> None:
    message = _refusal(_ray(16, cpu=32), host_memory_gib=1024, host_cpus=128)
    assert message.startswith(
        "(1) node 0: the scheduler is asked for 256 CPUs = rollout.scheduling_spec[0].cpu 256 "
        "(32 × 8 GPUs), over the node's 128 CPUs (from --host-cpus)"
    )
    assert "set rollout.scheduling_spec[0].cpu to 16 CPUs per GPU or less" in message


def test_within_ten_percent_warns() -> None:
    # 8 × 42 GB = 336 GiB of Ray's 358.4 GiB
    plan = _plan(_ray(42), host_memory_gib=512)
    assert plan.warnings[-1].startswith(
        "node 1: the scheduler is asked for 336.0 GiB = actor.scheduling_spec[0].mem "
        "336.0 GiB (42 GB × 8 GPUs), within 10% of the 358.4 GiB Ray offers"
    )


def test_a_spec_without_gpus_asks_one_bundle_on_one_node_and_warns() -> None:
    cfg = _ray(32)
    del cfg["actor"]["scheduling_spec"]  # SchedulingSpec's default: gpu 0
    plan = _plan(cfg, host_memory_gib=2048)
    assert plan.host is not None
    node1 = plan.host.groups[-1]
    assert [t.formula for t in node1.terms] == [
        "32 GB × 8 GPUs of workers in one bundle (gpu 0)",
        "8 × 8 GPUs of workers in one bundle (gpu 0)",
    ]
    assert any(
        w.startswith("actor.scheduling_spec[0].gpu=0 (SchedulingSpec's default)")
        for w in plan.warnings
    )


def test_a_detected_host_only_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = (Sourced(64 * GIB, "/proc/meminfo"), Sourced(8, "os.sched_getaffinity"))
    monkeypatch.setattr(settings_module, "detect_host", lambda: seen)
    plan = plan_config(_ray(128), settings=Settings.from_sources(environ={}))
    over = [w for w in plan.warnings if "Ray offers" in w]
    assert len(over) == 2
    assert over[0].endswith(
        "(this machine's figure, a guess of a node's: give --host-memory-gib / --host-cpus, "
        "or the hook's host_memory_gib / host_cpus, to check against a node's)"
    )
    assert "this machine's (/proc/meminfo), assumed to be a node" in over[0]


# --- what the run keeps in host memory (B4-B8) --------------------------------------------


def _terms(plan: Plan) -> list[tuple[str, str, str]]:
    assert plan.host is not None
    return [(t.rule, t.name, ",".join(t.phases)) for g in plan.host.groups for t in g.terms]


@pytest.mark.parametrize(
    ("changes", "terms"),
    [
        (
            {},
            [
                ("B4", "actor torch_memory_saver backup", "generation"),
                ("B7", "actor disk weight update", "update"),
            ],
        ),
        (
            {"actor__fsdp": {"memory_efficient_load": True, "offload_params": True}},
            [
                ("B4", "actor torch_memory_saver backup", "generation"),
                ("B5", "actor.fsdp.offload_params", "load,generation,update"),
                ("B6", "actor.fsdp.memory_efficient_load", "load"),
                ("B7", "actor disk weight update", "update"),
            ],
        ),
        (
            {"sglang__cpu_offload_gb": 4},
            [
                ("B8", "sglang.cpu_offload_gb (rollout)", "load,generation,update"),
                ("B4", "actor torch_memory_saver backup", "generation"),
                ("B7", "actor disk weight update", "update"),
            ],
        ),
        (
            {
                "rollout__backend": "vllm:d2t4",
                "vllm": {"model": "Qwen/Qwen3-8B", "enable_sleep_mode": True},
            },
            [
                ("B8", "rollout vLLM sleep level 1", "update"),
                ("B4", "actor torch_memory_saver backup", "generation"),
                ("B7", "actor disk weight update", "update"),
            ],
        ),
        # no enable_offload: no backups (the start-up rules refuse the colocation without it)
    ],
)
def test_each_term_of_host_memory(
    changes: dict[str, Any], terms: list[tuple[str, str, str]]
) -> None:
    assert _terms(_plan(_with(OFFLOADED, **changes))) == terms


def test_the_backups_are_the_gpu_estimates_own_numbers() -> None:
    plan = _plan(OFFLOADED)
    resident = plan["actor"].memory.resident  # type: ignore[union-attr]
    assert plan.host is not None
    backup = plan.host.groups[0].terms[0]
    assert backup.amount == resident * 8
    assert backup.formula.startswith("weights + gradients + optimizer states ")


def test_an_enable_offload_run_whose_backups_exceed_the_host_is_refused() -> None:
    plan = _plan(OFFLOADED)
    assert plan.host is not None
    peak = plan.host.groups[0].peak[1]
    message = _refusal(OFFLOADED, host_memory_gib=64)
    assert message == (
        f"node 0: host memory in use (generation) {peak / GIB:.1f} GiB = actor "
        f"torch_memory_saver backup {peak / GIB:.1f} GiB (weights + gradients + optimizer "
        f"states {peak / 8 / GIB:.1f} GiB per GPU × 8 GPUs, while offloaded), over the node's "
        f"64.0 GiB (from --host-memory-gib); the kernel's OOM killer (or Ray's memory monitor) "
        f"ends the run; offload fewer engines or spread them over more nodes"
    )
    _plan(OFFLOADED, host_memory_gib=1024)  # fits a large node


# --- the plan's text and JSON -------------------------------------------------------------


def test_the_plan_shows_the_host_in_text_and_json() -> None:
    plan = _plan(_ray(32), host_memory_gib=512, host_cpus=128)
    assert host_lines(plan) == [
        "",
        "host per node (scheduler.type=ray; 512.0 GiB from --host-memory-gib; 128 CPUs from "
        "--host-cpus):",
        "  nodes  term                            amount     formula",
        "  0      rollout.scheduling_spec[0].mem  256.0 GiB  32 GB × 8 GPUs",
        "  0      rollout.scheduling_spec[0].cpu  64 CPUs    8 × 8 GPUs",
        "  0      total                                      asked 256.0 GiB of Ray's 358.4 GiB; "
        "64 of 128 CPUs",
        "  1      actor.scheduling_spec[0].mem    256.0 GiB  32 GB × 8 GPUs",
        "  1      actor.scheduling_spec[0].cpu    64 CPUs    8 × 8 GPUs",
        "  1      total                                      asked 256.0 GiB of Ray's 358.4 GiB; "
        "64 of 128 CPUs",
    ]
    host = json.loads(json.dumps(plan.to_dict()))["host"]
    assert (host["scheduler"], host["memory"], host["memory_source"], host["cpus"]) == (
        "ray",
        512 * GIB,
        "--host-memory-gib",
        128,
    )
    assert [
        (n["first"], n["last"], n["requested_memory"], n["requested_cpus"]) for n in host["nodes"]
    ] == [(0, 0, 256 * GIB, 64), (1, 1, 256 * GIB, 64)]


def test_identical_nodes_are_one_group() -> None:
    plan = _plan(_ray(32, n_nodes=5), host_memory_gib=512)
    assert plan.host is not None
    assert [g.label for g in plan.host.groups] == ["node 0", "nodes 1–4"]


def test_nothing_host_side_and_no_figure_adds_nothing() -> None:
    cfg = {"cluster": {"n_nodes": 1, "n_gpus_per_node": 8}, "actor": {"backend": "fsdp:d8"}}
    assert _plan(cfg).host is None
    assert _plan(cfg).to_dict()["host"] is None


def test_check_refuses_with_exit_code_1(main_cli: MainCli, tmp_path: Path) -> None:
    path = tmp_path / "ray.yaml"
    path.write_text(yaml.safe_dump(_ray(128)))
    ran = main_cli("check", str(path), "--host-memory-gib", "512")
    assert ran.returncode == 1
    assert ran.stderr.startswith(
        "areal-alloc check: (1) node 0: the scheduler is asked for 1024.0 GiB"
    )
    ok = main_cli("check", str(path), "--host-memory-gib", "4096", "--host-cpus", "256")
    assert ok.returncode == 0
    assert (
        "host per node (scheduler.type=ray; 4096.0 GiB from --host-memory-gib; 256 CPUs "
        "from --host-cpus):" in ok.stdout
    )


def test_the_report_draws_a_host_table() -> None:
    from areal_alloc.report import render_report

    page = render_report(_plan(_ray(32), host_memory_gib=512).to_dict())
    assert '<section id="host"><h2>Host memory and CPUs per node</h2>' in page
    assert (
        '<tr><td>1</td><td class="mono">actor.scheduling_spec[0].mem</td><td>256.0 GiB</td>'
        "<td>32 GB × 8 GPUs</td></tr>"
    ) in page
    none = {"cluster": {"n_nodes": 1, "n_gpus_per_node": 8}, "actor": {"backend": "fsdp:d8"}}
    assert 'id="host"' not in render_report(_plan(none).to_dict())


def test_the_hooks_parameters_reach_the_plan() -> None:
    from omegaconf import OmegaConf

    from areal_alloc.hydra_hook import ValidateAllocations

    with pytest.raises(SystemExit) as caught:
        ValidateAllocations(host_memory_gib=512).on_run_start(OmegaConf.create(_ray(128)))
    assert str(caught.value.code).startswith(
        "areal-alloc: (1) node 0: the scheduler is asked for 1024.0 GiB"
    )
    ValidateAllocations(host_memory_gib="4096", host_cpus=256).on_run_start(
        OmegaConf.create(_ray(128))
    )


def test_the_verdict_key_holds_this_machines_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from omegaconf import OmegaConf

    from areal_alloc import _verdicts
    from areal_alloc.hydra_hook import ValidateAllocations

    monkeypatch.setenv(_verdicts.SWITCH, "0")
    config = OmegaConf.create(_ray(32))
    hook = ValidateAllocations()
    first = hook._verdict_key(config)
    monkeypatch.setattr(_verdicts, "host_identity", lambda: ["MemTotal: 1 kB", 1])
    assert first is not None
    assert hook._verdict_key(config) not in (None, first)
