"""areal-alloc's own settings come from outside the experiment (``areal_alloc.settings``).

First to last: a flag, the hook's parameter, ``AREAL_ALLOC_<NAME>``, nvidia-smi (the
GPU only), the config's ``cluster`` keys. In process where a process is not needed;
the environment at start-up, a fake ``nvidia-smi`` on PATH, ``preflight`` and the hook
in subprocesses.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from areal_alloc import AllocationError
from areal_alloc import settings as settings_module
from areal_alloc.cli import main
from areal_alloc.settings import (
    DETECT_ENV,
    NAMES,
    ChosenGPU,
    Settings,
    env_var,
    flag,
    gpu_from_smi,
)
from tests.conftest import COMMAND, AppRun, Ran

GIB = 1 << 30
LAUNCH = Path(__file__).parents[1] / "apps" / "launch"
USER_APP = Path(__file__).parents[1] / "apps" / "user_app" / "my_app.py"

#: Qwen3-8B on fsdp:d4 with 16,384 tokens per micro-batch: about 116 GiB per GPU,
#: over any 80 GiB GPU; the config names no GPU (the reference's loader would refuse
#: cluster.gpu).
TOO_BIG = (
    "cluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
    "rollout: {backend: 'sglang:d4'}\n"
    "actor: {backend: 'fsdp:d4', path: Qwen/Qwen3-8B, mb_spec: {max_tokens_per_mb: 16384}}\n"
)
#: Qwen2.5-0.5B on the same layout: a few GiB per GPU.
SMALL = TOO_BIG.replace("Qwen/Qwen3-8B", "Qwen/Qwen2.5-0.5B").replace("16384", "4096")

DETECTED = gpu_from_smi("NVIDIA H800, 81559 MiB\n" * 8)


def _gpu(chosen: ChosenGPU | None) -> tuple[str, str] | None:
    return None if chosen is None else (chosen.name, chosen.source)


# --- which source wins ---------------------------------------------------------------

CLUSTER = {"cluster": {"gpu": "A100-80GB"}}

PRECEDENCE = [
    # (flags, hook parameters, environment, config, (GPU, its source))
    (
        {"gpu": "H800"},
        {"gpu": "H20"},
        {"AREAL_ALLOC_GPU": "H200"},
        CLUSTER,
        ("H800", "--gpu"),
    ),
    (
        {"gpu": None},
        {"gpu": "H20"},
        {"AREAL_ALLOC_GPU": "H200"},
        CLUSTER,
        ("H20", "hydra.callbacks.areal_alloc.gpu"),
    ),
    ({}, {"gpu": ""}, {"AREAL_ALLOC_GPU": "H200"}, CLUSTER, ("H200", "AREAL_ALLOC_GPU")),
    ({}, {}, {"AREAL_ALLOC_GPU": "96"}, CLUSTER, ("96 GiB GPU", "AREAL_ALLOC_GPU")),
    ({}, {}, {}, CLUSTER, ("H800", "nvidia-smi")),  # a launch node's GPU beats the config
    ({}, {}, {DETECT_ENV: "0"}, CLUSTER, ("A100-80GB", "cluster.gpu")),
    (
        {},
        {},
        {DETECT_ENV: "off"},
        {"cluster": {"gpu": "X", "gpu_memory_gib": 24}},
        ("X (24 GiB)", "cluster.gpu_memory_gib"),
    ),
    ({}, {"gpu": 80}, {}, {}, ("80 GiB GPU", "hydra.callbacks.areal_alloc.gpu")),
    ({}, {}, {DETECT_ENV: "0"}, {}, None),
]


@pytest.mark.parametrize(("flags", "hook", "environ", "cfg", "expected"), PRECEDENCE)
def test_the_gpu_comes_from_the_first_source_that_gives_it(
    monkeypatch: pytest.MonkeyPatch,
    flags: dict[str, object],
    hook: dict[str, object],
    environ: dict[str, str],
    cfg: dict[str, object],
    expected: tuple[str, str] | None,
) -> None:
    monkeypatch.setattr(settings_module, "detect_gpu", lambda: DETECTED)
    given = Settings.from_sources(flags=flags, hook=hook, environ=environ)
    assert _gpu(given.resolve(cfg).gpu) == expected


#: the host's figures are checked where a plan is (check, preflight, report): the others plan
#: nothing of a host (tests/estimate/test_host.py)
HOST = ("host_memory_gib", "host_cpus")


# mean_gen_len is a count and no cluster key (tests/estimate/test_rl_step.py); neither are the
# host's figures (tests/estimate/test_host.py); reference_version is a choice
# (tests/cli/test_reference_keys.py)
@pytest.mark.parametrize(
    "name",
    [
        n
        for n in NAMES
        if n
        not in (
            "gpu",
            "on_memory",
            "mean_gen_len",
            "host_memory_gib",
            "host_cpus",
            "reference_version",
        )
    ],
)
def test_every_number_has_a_flag_a_hook_parameter_and_a_variable(name: str) -> None:
    cfg = {"cluster": {name: 0.4}}
    ranked = [
        ({"flags": {name: 0.1}, "hook": {name: 0.2}, "environ": {env_var(name): "0.3"}}, 0.1),
        ({"hook": {name: 0.2}, "environ": {env_var(name): "0.3"}}, 0.2),
        ({"environ": {env_var(name): "0.3"}}, 0.3),
        ({"environ": {}}, 0.4),
    ]
    sources = [flag(name), f"hydra.callbacks.areal_alloc.{name}", env_var(name), f"cluster.{name}"]
    for (given, value), source in zip(ranked, sources, strict=True):
        resolved = Settings.from_sources(detect=False, **given).resolve(cfg)  # type: ignore[arg-type]
        found = resolved.memory_reserve if name == "memory_reserve_gib" else getattr(resolved, name)
        expected = int(value * GIB) if name == "memory_reserve_gib" else value
        assert found is not None
        assert (found.value, found.source) == (expected, source)


def test_on_memory_from_the_hook_then_the_environment_else_fail() -> None:
    table = [
        ({"hook": {"on_memory": "off"}, "environ": {"AREAL_ALLOC_ON_MEMORY": "warn"}}, "off"),
        ({"environ": {"AREAL_ALLOC_ON_MEMORY": "warn"}}, "warn"),
        ({"environ": {}}, "fail"),
    ]
    for given, expected in table:
        assert Settings.from_sources(**given).on_memory().value == expected  # type: ignore[arg-type]


def test_settings_given_nowhere_read_only_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_module, "detect_gpu", lambda: DETECTED)
    monkeypatch.setenv("AREAL_ALLOC_GPU", "B200")
    # Settings(): what plan_config(cfg) uses; no environment, no detection
    assert _gpu(Settings().resolve({"cluster": {"gpu": "H20"}}).gpu) == ("H20", "cluster.gpu")


# --- nvidia-smi's names -------------------------------------------------------------

SMI = [
    ("NVIDIA H800, 81559 MiB", ("H800", 80 * GIB)),
    ("NVIDIA A100-SXM4-80GB, 81920 MiB\n" * 8, ("A100-80GB", 85198045184)),
    ("NVIDIA A100-SXM4-40GB, 40960 MiB", ("A100-40GB", int(39.5 * GIB))),
    ("NVIDIA A100-PCIE-40GB, 40960 MiB", ("A100-40GB", int(39.5 * GIB))),
    ("NVIDIA A800-SXM4-80GB, 81920 MiB", ("A800", 80 * GIB)),
    ("NVIDIA H100 80GB HBM3, 81559 MiB", ("H100-80GB", int(79.18 * GIB))),
    # what the catalogue GPU reports to torch (catalogue.REPORTED_GIB), not nvidia-smi's MiB
    ("NVIDIA H200, 143771 MiB", ("H200", int(139.801 * GIB))),
    ("NVIDIA H20, 97871 MiB", ("H20", 96 * GIB)),
    ("NVIDIA L40S, 46068 MiB", ("L40S", 46068 << 20)),
    ("NVIDIA GeForce RTX 4090, 24564 MiB", ("RTX-4090", int(23.64 * GIB))),
    # not the catalogue's SXM H100 (slower): its memory only, as reported
    ("NVIDIA H100 PCIe, 81559 MiB", ("NVIDIA H100 PCIe (79.6 GiB)", 81559 << 20)),
    # mixed GPUs: the smallest
    ("NVIDIA H200, 143771 MiB\nNVIDIA H20, 97871 MiB\n", ("H20", 96 * GIB)),
    ("", None),
    ("No devices were found", None),
    ("NVIDIA H800, [N/A]", None),
    ("NVIDIA Mystery, 0 MiB", None),
]


@pytest.mark.parametrize(("output", "expected"), SMI)
def test_nvidia_smi_names_map_to_the_catalogue(
    output: str, expected: tuple[str, int] | None
) -> None:
    found = gpu_from_smi(output)
    assert (None if found is None else (found.name, found.capacity)) == expected
    if found is not None:
        assert found.source == "nvidia-smi"
        assert found.described == f"{found.name}, detected by nvidia-smi"


# --- one line naming the source ------------------------------------------------------

_OTHER = (
    "unknown GPU 'X100': did you mean RTX-4090, H800, H200? known GPUs: A100-40GB, "
    "A100-80GB, A800, H100-80GB, H200, H20, L40S, B200, H800, RTX-4090; or give its memory "
    "in GiB, with its speeds: "
)
BAD = [
    (
        {"environ": {"AREAL_ALLOC_GPU": "X100"}},
        "AREAL_ALLOC_GPU: "
        + _OTHER
        + "AREAL_ALLOC_GPU=96 AREAL_ALLOC_PEAK_TFLOPS=990 AREAL_ALLOC_HBM_TBPS=4",
    ),
    (
        {"hook": {"gpu": "X100"}},
        "hydra.callbacks.areal_alloc.gpu: "
        + _OTHER
        + "hydra.callbacks.areal_alloc.gpu=96 hydra.callbacks.areal_alloc.peak_tflops=990 "
        "hydra.callbacks.areal_alloc.hbm_tbps=4",
    ),
    ({"flags": {"gpu": "X100"}}, _OTHER + "--gpu 96 --peak-tflops 990 --hbm-tbps 4"),
    (
        {"environ": {"AREAL_ALLOC_GPU": "0"}},
        "GPU memory '0' (AREAL_ALLOC_GPU): must be a number of GiB above 0 and at most 65,536",
    ),
    (
        {"hook": {"gpu": [80]}},
        "hydra.callbacks.areal_alloc.gpu=[80]: must be a GPU name such as 'H100-80GB' or its "
        "memory in GiB (80)",
    ),
    (
        {"environ": {"AREAL_ALLOC_COMPUTE_EFFICIENCY": "1.5"}},
        "AREAL_ALLOC_COMPUTE_EFFICIENCY='1.5': the limit is 1",
    ),
    (
        {"environ": {"AREAL_ALLOC_PEAK_TFLOPS": "fast"}},
        "AREAL_ALLOC_PEAK_TFLOPS='fast': must be a number of TFLOP/s above 0 and at most 1,000,000",
    ),
    (
        {"environ": {"AREAL_ALLOC_MEMORY_RESERVE_GIB": "2000"}},
        "AREAL_ALLOC_MEMORY_RESERVE_GIB='2000': the limit is 1,024 GiB",
    ),
    (
        {"environ": {"AREAL_ALLOC_ON_MEMORY": "maybe"}},
        "AREAL_ALLOC_ON_MEMORY='maybe': must be 'fail', 'warn' or 'off'",
    ),
]


@pytest.mark.parametrize(("given", "message"), BAD)
def test_a_bad_setting_is_one_line_naming_its_source(
    given: dict[str, dict[str, object]], message: str
) -> None:
    chosen = Settings.from_sources(detect=False, **given)  # type: ignore[arg-type]
    with pytest.raises(AllocationError) as caught:
        chosen.resolve({})  # resolves on_memory too
    assert caught.value.message == message


# --- the commands ---------------------------------------------------------------------


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(TOO_BIG)
    return path


def test_check_names_where_the_gpu_came_from(
    exp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["check", str(exp), "--gpu", "H800"]) == 1
    refused = capsys.readouterr().err
    assert refused.startswith("areal-alloc check: actor.backend='fsdp:d4': needs about")
    assert "over the 80.0 GiB of a H800;" in refused
    assert refused.rstrip().endswith("(GPU: H800, from --gpu)")

    assert main(["check", str(exp), "--gpu", "H800", "--on-memory", "warn", "--json"]) == 0
    cluster = json.loads(capsys.readouterr().out)["cluster"]
    assert (cluster["gpu"], cluster["gpu_source"], cluster["gpu_origin"]) == (
        "H800",
        "--gpu",
        "from --gpu",
    )

    monkeypatch.setenv("AREAL_ALLOC_GPU", "H800")
    monkeypatch.setenv("AREAL_ALLOC_ON_MEMORY", "warn")
    assert main(["check", str(exp)]) == 0
    text = capsys.readouterr().out
    assert "memory per GPU (estimate; H800, 80.0 GiB, from AREAL_ALLOC_GPU;" in text
    assert main(["check", str(exp), "--on-memory", "fail"]) == 1  # the flag wins
    assert capsys.readouterr().err.rstrip().endswith("(GPU: H800, from AREAL_ALLOC_GPU)")


def test_explain_and_layouts_take_the_gpu_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AREAL_ALLOC_GPU", "H100-80GB")
    assert main(["explain", "fsdp:d8", "--model", "Qwen3-8B", "--tokens", "16384"]) == 0
    assert "memory per GPU (Qwen3-8B on H100-80GB (from AREAL_ALLOC_GPU); an estimate)" in (
        capsys.readouterr().out
    )
    assert main(["layouts", "fsdp", "8", "--model", "Qwen3-8B", "--rank", "--top", "1"]) == 0
    assert capsys.readouterr().out.startswith("layout")
    monkeypatch.setenv("AREAL_ALLOC_MEMORY_RESERVE_GIB", "10")
    assert main(["explain", "fsdp:d8", "--model", "Qwen3-8B", "--json"]) == 0
    terms = json.loads(capsys.readouterr().out)["memory"]["terms"]
    assert {t["name"]: t["bytes"] for t in terms}["reserve"] == 10 * GIB


COMMANDS_WITH_A_GPU = {
    "check": ["check", "x.yaml"],
    "preflight": ["preflight", "--", "true"],
    "explain": ["explain", "fsdp:d8"],
    "layouts": ["layouts", "fsdp", "8"],
    "suggest": ["suggest"],
    "calibrate": ["calibrate", "fsdp:d8"],
}
SPEEDS = [
    flag(n)
    for n in NAMES
    if n not in ("gpu", "on_memory", "memory_reserve_gib", "reference_version", *HOST)
]


@pytest.mark.parametrize("name", list(COMMANDS_WITH_A_GPU))
def test_one_set_of_flag_names_everywhere(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*COMMANDS_WITH_A_GPU[name][:1], "--help"]) == 0
    text = capsys.readouterr().out
    wanted = ["--gpu"] + ([] if name == "explain" else SPEEDS)
    if name in ("check", "preflight"):
        wanted += [
            "--on-memory",
            "--memory-reserve-gib",
            "--reference-version",
            *(flag(n) for n in HOST),
        ]
    # a generation length is estimated by the plan, suggest and explain's generation; layouts
    # --rank (decode at --seq-len contexts) and calibrate (a measured step) refuse the flag
    unmeant = ["--mean-gen-len"] if name in ("layouts", "calibrate") else []
    wanted = [f for f in wanted if f not in unmeant] + (
        ["--mean-gen-len"] if name == "explain" else []
    )
    assert [f for f in wanted if f"{f} " not in text and f"{f}\n" not in text] == []
    assert [f for f in unmeant if f"{f} " in text or f"{f}\n" in text] == []


# --- what only a process shows: the environment at start-up, nvidia-smi, exec -------------


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != DETECT_ENV}
    env.update(extra)
    return env


def _fake_smi(folder: Path, body: str) -> str:
    """A ``nvidia-smi`` first on PATH; returns the new PATH."""
    folder.mkdir(exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_nvidia_smi_on_path_gives_the_gpu(tmp_path: Path, exp: Path) -> None:
    lines = "\n".join(["NVIDIA H800, 81559 MiB"] * 8)
    path = _fake_smi(tmp_path / "bin", f"printf '{lines}\\n'")
    done = _run(["check", str(exp)], tmp_path, _env(tmp_path, PATH=path))
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("(GPU: H800, detected by nvidia-smi)"), done.stderr
    data = _run(
        ["check", str(exp), "--on-memory", "warn", "--json"], tmp_path, _env(tmp_path, PATH=path)
    )
    assert json.loads(data.stdout)["cluster"]["gpu_source"] == "nvidia-smi"
    # AREAL_ALLOC_GPU wins, and AREAL_ALLOC_DETECT=0 turns detection off
    given = _run(["check", str(exp)], tmp_path, _env(tmp_path, PATH=path, AREAL_ALLOC_GPU="B200"))
    assert (given.returncode, given.stderr) == (0, "")
    off = _run(
        ["check", str(exp), "--json"], tmp_path, _env(tmp_path, PATH=path, **{DETECT_ENV: "0"})
    )
    assert json.loads(off.stdout)["cluster"]["gpu"] is None


@pytest.mark.parametrize(
    "body",
    [
        "echo 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2; exit 9",
        "echo 'garbage, and more garbage'",
        "sleep 30",  # detection gives up after its timeout
    ],
)
def test_a_failing_nvidia_smi_is_silent(tmp_path: Path, exp: Path, body: str) -> None:
    path = _fake_smi(tmp_path / "bin", body)
    done = _run(["check", str(exp), "--json"], tmp_path, _env(tmp_path, PATH=path))
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["cluster"]["gpu"] is None


LOADER = """
import json, sys
from pathlib import Path
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
file = Path(sys.argv[sys.argv.index("--config") + 1]).absolute()
with initialize_config_dir(config_dir=str(file.parent), version_base=None):
    cfg = compose(config_name=file.stem)
print(json.dumps(OmegaConf.to_container(cfg)))
"""


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_preflight_refuses_on_the_gpu_given_outside_and_passes_the_config_untouched(
    tmp_path: Path, how: str
) -> None:
    shutil.copy(LAUNCH / "train.py", tmp_path / "train.py")
    (tmp_path / "load.py").write_text(LOADER)
    (tmp_path / "big.yaml").write_text(TOO_BIG)
    (tmp_path / "small.yaml").write_text(SMALL)
    flags = ["--gpu", "H800"] if how == "flag" else []
    env = _env(tmp_path) if how == "flag" else _env(tmp_path, AREAL_ALLOC_GPU="H800")
    python = sys.executable

    refused = _run(
        ["preflight", *flags, "--", python, "train.py", "--config", "big.yaml"], tmp_path, env
    )
    assert refused.returncode == 1
    assert refused.stdout == ""  # the training script never started
    origin = "from --gpu" if how == "flag" else "from AREAL_ALLOC_GPU"
    assert refused.stderr.startswith("areal-alloc preflight: actor.backend='fsdp:d4': needs")
    assert refused.stderr.rstrip().endswith(f"(GPU: H800, {origin})")

    ran = _run(
        ["preflight", *flags, "--", python, "load.py", "--config", "small.yaml"], tmp_path, env
    )
    assert ran.returncode == 0, ran.stderr
    from omegaconf import OmegaConf

    assert json.loads(ran.stdout) == OmegaConf.to_container(OmegaConf.load(tmp_path / "small.yaml"))
    assert (tmp_path / "small.yaml").read_text() == SMALL
    assert f"H800, 80.0 GiB, {origin}" in ran.stderr


def _hook(app: AppRun, tmp_path: Path, *overrides: str, **env: str) -> Ran:
    """The user's app with the hook, run as ``python my_app.py`` runs it, in this process."""
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    return app(
        USER_APP,
        "+actor.path=Qwen/Qwen3-8B",
        *overrides,
        cwd=tmp_path,
        env={DETECT_ENV: None, "MARKER_DIR": str(markers), "HYDRA_FULL_ERROR": "0", **env},
    )


def test_the_hook_takes_the_gpu_from_its_parameter_or_the_environment(
    tmp_path: Path, app_in_process: AppRun
) -> None:
    for run, origin in (
        (
            _hook(app_in_process, tmp_path, "hydra.callbacks.areal_alloc.gpu=RTX-4090"),
            "from hydra.callbacks",
        ),
        (_hook(app_in_process, tmp_path, AREAL_ALLOC_GPU="RTX-4090"), "from AREAL_ALLOC_GPU"),
    ):
        assert run.returncode == 1
        assert run.stderr.startswith("areal-alloc: actor.backend='fsdp:d4t2': needs about ")
        assert f"(GPU: RTX-4090, {origin}" in run.stderr
        assert "RAN" not in run.stdout
    warned = _hook(
        app_in_process,
        tmp_path,
        "hydra.callbacks.areal_alloc.on_memory=warn",
        AREAL_ALLOC_GPU="RTX-4090",
    )
    assert warned.returncode == 0, warned.stderr
    assert "RAN actor.backend=fsdp:d4t2" in warned.stdout


# --- properties -------------------------------------------------------------------------

from hypothesis import given as given_any  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given_any(st.text(max_size=300))
def test_any_nvidia_smi_output_is_a_gpu_or_nothing(output: str) -> None:
    found = gpu_from_smi(output)  # detection never raises: its failure is silent
    assert found is None or (found.capacity > 0 and found.source == "nvidia-smi")


@given_any(st.sampled_from(NAMES), st.text(max_size=120))
def test_any_setting_in_the_environment_is_read_or_refused_in_one_line(
    name: str, value: str
) -> None:
    chosen = Settings.from_sources(environ={env_var(name): value}, detect=False)
    message = None
    try:
        chosen.resolve({})
    except AllocationError as error:
        message = error.message
    if message is not None:
        assert "\n" not in message
        assert message.startswith((env_var(name), "GPU memory"))
