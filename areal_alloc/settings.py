"""areal-alloc's own settings: the GPU, its speeds, the efficiencies, the reserve, ``on_memory``.

They describe the machine and how strict to be, not the experiment, and the
reference's loader refuses keys its dataclasses lack (``load_expr_config``
merges the YAML into ``OmegaConf.structured(config_cls)``: ``ConfigKeyError:
Key 'gpu' not in 'ClusterSpecConfig'``; areal/api/cli_args.py, inclusionAI/AReaL
cbff54d6). So each setting comes from, first to last:

1. a command-line flag (``--gpu H800``, ``--peak-tflops 990`` …), the same names
   on every subcommand;
2. the validation hook's own parameter (``hydra.callbacks.areal_alloc.gpu=H800``);
3. the environment (``AREAL_ALLOC_GPU=H800``: ``AREAL_ALLOC_`` + the name in capitals);
4. detection: the GPU from ``nvidia-smi`` when it is on ``PATH`` (a launch
   node), silent when it fails or takes longer than :data:`DETECT_TIMEOUT`; the
   host's memory and CPUs from this machine (``/proc/meminfo``'s MemTotal and the
   CPUs this process may run on, :func:`detect_host`), taken as a node's (a guess:
   the check may run on a login node, so a detected host only warns,
   ``areal_alloc.estimate.host``); ``AREAL_ALLOC_DETECT=0`` turns both off;
5. the experiment's own keys (``cluster.gpu``, ``cluster.gpu_memory_gib``, …),
   still read for plain Hydra apps, whose configs take any key (never for the
   host: ``host_memory_gib`` and ``host_cpus`` are no keys of the experiment).

:class:`Settings` holds the first three (and whether to detect);
:meth:`Settings.resolve` adds detection and a config's keys and returns every value
with where it came from (:class:`Resolved`).
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from areal_alloc._config import child, is_mapping, shown
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.limits import MAX_COUNT
from areal_alloc.numbers import MAX_SPEED, is_number_text, quote, read_float, read_int, read_names
from areal_alloc.vocab import SETTING_NAMES

__all__ = [
    "DETECTED_HOST",
    "DETECT_ENV",
    "DETECT_TIMEOUT",
    "ENV_PREFIX",
    "HOOK_PREFIX",
    "MAX_GPU_MEMORY_GIB",
    "MAX_HOST_CPUS",
    "MAX_HOST_MEMORY_GIB",
    "MAX_RESERVE_GIB",
    "NAMES",
    "ON_MEMORY",
    "ChosenGPU",
    "Resolved",
    "Settings",
    "Sourced",
    "detect_gpu",
    "detect_host",
    "env_var",
    "flag",
    "gpu_from_smi",
    "gpu_from_text",
]

if TYPE_CHECKING:
    from areal_alloc.catalogue import GPU

T = TypeVar("T")
GIB = 1 << 30  # the catalogue's unit (its memory figures are taken as GiB)

#: Every setting, by the name the hook takes (one home: ``vocab.SETTING_NAMES``).
NAMES = SETTING_NAMES
ENV_PREFIX = "AREAL_ALLOC_"
HOOK_PREFIX = "hydra.callbacks.areal_alloc."
DETECT_ENV = "AREAL_ALLOC_DETECT"
#: Seconds ``nvidia-smi`` may take before detection gives up, silently.
DETECT_TIMEOUT = 1.0
ON_MEMORY = ("fail", "warn", "off")

#: The speeds and efficiencies: (bound above 0, unit) of each.
_FLOATS: dict[str, tuple[float, str]] = {
    "peak_tflops": (MAX_SPEED, "TFLOP/s"),
    "hbm_tbps": (MAX_SPEED, "TB/s"),
    "nvlink_gbps": (MAX_SPEED, "GB/s"),
    "inter_node_gbps": (MAX_SPEED, "Gb/s"),
    "disk_gbps": (MAX_SPEED, "GB/s"),
    "compute_efficiency": (1.0, ""),
    "comm_efficiency": (1.0, ""),
}
#: Bounds of one GPU's memory and of the memory kept back from the estimate, in GiB.
MAX_GPU_MEMORY_GIB = 65536
MAX_RESERVE_GIB = 1024
#: Bounds of one node's host memory (GiB) and CPUs (far beyond any machine).
MAX_HOST_MEMORY_GIB = 1 << 24
MAX_HOST_CPUS = 1 << 20
#: The sources detection names for the host's memory and CPUs (this machine's, taken as a
#: node's): ``Sourced.source`` of a detected figure is one of them.
DETECTED_HOST = ("/proc/meminfo", "os.sched_getaffinity", "os.cpu_count")


def flag(name: str) -> str:
    """``--peak-tflops`` for ``peak_tflops``."""
    return "--" + name.replace("_", "-")


def env_var(name: str) -> str:
    """``AREAL_ALLOC_PEAK_TFLOPS`` for ``peak_tflops``."""
    return ENV_PREFIX + name.upper()


@dataclass(frozen=True, slots=True)
class Sourced(Generic[T]):
    """A value and where it came from: ``--gpu``, ``hydra.callbacks.areal_alloc.gpu``,
    ``AREAL_ALLOC_GPU``, ``nvidia-smi`` or a config key such as ``cluster.gpu``."""

    value: T
    source: str

    @property
    def origin(self) -> str:
        """``from --gpu``, ``detected by nvidia-smi``, ``this machine's (/proc/meminfo),
        assumed to be a node``."""
        if self.source == "nvidia-smi":
            return "detected by nvidia-smi"
        if self.source in DETECTED_HOST:
            return f"this machine's ({self.source}), assumed to be a node"
        return f"from {self.source}"

    @property
    def detected(self) -> bool:
        """Whether detection found it (nvidia-smi, this machine's memory or CPUs)."""
        return self.source == "nvidia-smi" or self.source in DETECTED_HOST


@dataclass(frozen=True, slots=True)
class ChosenGPU:
    """The GPU memory is checked against: its label, bytes, catalogue entry (None when
    only its memory is known) and where it came from."""

    name: str
    capacity: int
    source: str
    catalogue: GPU | None = None

    @property
    def origin(self) -> str:
        return Sourced(self.name, self.source).origin

    @property
    def described(self) -> str:
        """``H800, detected by nvidia-smi``."""
        return f"{self.name}, {self.origin}"


#: Any other GPU, as each source gives it (96 GiB at 990 TFLOP/s and 4 TB/s).
_EXAMPLE = (("gpu", "96"), ("peak_tflops", "990"), ("hbm_tbps", "4"))


def gpu_from_text(text: str, source: str = "") -> ChosenGPU:
    """A catalogue GPU name (``H100-80GB``) or a memory size in GiB (``80``, ``80GiB``),
    given by ``source`` (``--gpu``, ``AREAL_ALLOC_GPU`` …; named in an error)."""
    raw = text.strip()
    digits = raw.lower().removesuffix("gib").removesuffix("gb").strip()
    from areal_alloc.catalogue import find_gpu, reported_bytes  # only when a GPU is named

    where = f" ({source})" if source else ""
    if is_number_text(digits):  # a size, not a name: the one reader of numbers decides
        try:
            gib = read_float(digits, minimum=0, maximum=MAX_GPU_MEMORY_GIB, above=True, unit="GiB")
        except AllocationValidationError as error:
            rule = error.message.split(": ", 1)[-1]
            raise AllocationValidationError(f"GPU memory {quote(raw)}{where}: {rule}") from None
        return ChosenGPU(f"{gib:g} GiB GPU", int(gib * GIB), source)
    try:
        gpu = find_gpu(raw)
    except AllocationError as error:
        if not source:
            raise
        # the catalogue's close matches, then how this source gives any other GPU
        known = error.message.rsplit("; or give", 1)[0]
        if source.startswith("--"):
            other = f"{source} 96 --peak-tflops 990 --hbm-tbps 4"
        elif source.startswith(HOOK_PREFIX):
            other = " ".join(f"{HOOK_PREFIX}{n}={v}" for n, v in _EXAMPLE)
        else:
            other = " ".join(f"{env_var(n)}={v}" for n, v in _EXAMPLE)
        where = "" if source.startswith("--") else f"{source}: "  # a flag is plain to see
        raise AllocationValidationError(
            f"{where}{known}; or give its memory in GiB, with its speeds: {other}"
        ) from None
    return ChosenGPU(gpu.name, reported_bytes(gpu), source, gpu)


# --- detection -----------------------------------------------------------------------

#: The product names ``nvidia-smi --query-gpu=name`` prints for the catalogue's GPUs
#: whose short name is not already in them, e.g. 'NVIDIA H100 80GB HBM3' and
#: 'NVIDIA GeForce RTX 4090' (skypilot-org/skypilot#2945, sky/provision/runpod/utils.py),
#: 'NVIDIA A800-SXM4-80GB' (dexmal/dexbotic#41, an nvidia-smi table),
#: 'NVIDIA A100-SXM4-80GB' / '-40GB' / 'NVIDIA A100-PCIE-40GB' (vllm-project/aibrix#2388,
#: its GPU list). Others ('NVIDIA H800', 'NVIDIA H200', 'NVIDIA H20', 'NVIDIA L40S',
#: 'NVIDIA B200') are the catalogue's name after 'NVIDIA '. A name not matched here
#: (e.g. 'NVIDIA H100 PCIe', slower than the catalogue's SXM H100) counts by the
#: memory it reports.
_SMI_NAMES = {
    "a100-sxm4-80gb": "A100-80GB",
    "a100-sxm4-40gb": "A100-40GB",
    "a100-pcie-40gb": "A100-40GB",
    "a800-sxm4-80gb": "A800",
    "h100 80gb hbm3": "H100-80GB",
    "geforce rtx 4090": "RTX-4090",
}
_SMI_SHORT = ("h800", "h200", "h20", "l40s", "b200")


def gpu_from_smi(output: str) -> ChosenGPU | None:
    """The GPU of ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader``
    output (one ``NVIDIA H800, 81559 MiB`` line per GPU); the smallest when they
    differ; None when nothing parses."""
    found: list[tuple[float, str]] = []
    for line in output.splitlines():
        name, _, memory = line.rpartition(",")
        number, _, unit = memory.strip().partition(" ")
        if not name.strip() or unit.strip().lower() != "mib" or not number.isdigit():
            continue
        found.append((int(number[:12]) / 1024, name.strip()))
    if not found:
        return None
    from areal_alloc.catalogue import find_gpu, reported_bytes

    gib, name = min(found)
    short = name.lower().removeprefix("nvidia").strip()
    known = _SMI_NAMES.get(short) or (short if short in _SMI_SHORT else None)
    if known is not None:
        gpu = find_gpu(known)
        return ChosenGPU(gpu.name, reported_bytes(gpu), "nvidia-smi", gpu)
    if not 0 < gib <= MAX_GPU_MEMORY_GIB:
        return None
    label = f"{name[:60]} ({gib:.1f} GiB)"
    return ChosenGPU(label, int(gib * GIB), "nvidia-smi")


@functools.lru_cache(maxsize=4)
def _smi(executable: str) -> ChosenGPU | None:
    import subprocess  # only where nvidia-smi exists

    try:
        done = subprocess.run(
            [executable, "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=DETECT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if done.returncode != 0:
        return None
    return gpu_from_smi(done.stdout[:100_000])


def detect_gpu() -> ChosenGPU | None:
    """The GPU ``nvidia-smi`` reports, once per process; None without it or on failure."""
    executable = shutil.which("nvidia-smi")
    return _smi(executable) if executable else None


#: Bytes of ``/proc/meminfo`` read at most (MemTotal is its first line).
_MEMINFO_BYTES = 4096


@functools.lru_cache(maxsize=1)
def detect_host() -> tuple[Sourced[int] | None, Sourced[int] | None]:
    """This machine's memory in bytes (``/proc/meminfo``'s MemTotal, in kB there) and the
    CPUs this process may run on (``os.sched_getaffinity``, else ``os.cpu_count``), once
    per process (one small read: the hook's start-up stays as it was); None where
    unknown (no ``/proc``: macOS, Windows)."""
    memory: Sourced[int] | None = None
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            text = meminfo.read(_MEMINFO_BYTES).decode("ascii", "replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if name == "MemTotal" and len(words) == 2 and words[0].isdigit() and words[1] == "kB":
            kib = int(words[0][:15])
            if 0 < kib <= MAX_HOST_MEMORY_GIB << 20:
                memory = Sourced(kib * 1024, "/proc/meminfo")
            break
    cpus: Sourced[int] | None = None
    affinity = getattr(os, "sched_getaffinity", None)
    try:
        count = len(affinity(0)) if affinity is not None else 0
    except OSError:
        count = 0
    if count:
        cpus = Sourced(count, "os.sched_getaffinity")
    else:
        total = os.cpu_count()
        cpus = Sourced(total, "os.cpu_count") if total else None
    return memory, cpus


# --- resolving -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resolved:
    """Every setting with where it came from (None: not given anywhere)."""

    gpu: ChosenGPU | None = None
    peak_tflops: Sourced[float] | None = None
    hbm_tbps: Sourced[float] | None = None
    nvlink_gbps: Sourced[float] | None = None
    inter_node_gbps: Sourced[float] | None = None
    #: the shared file system a disk weight update crosses, GB/s (areal_alloc.estimate.system)
    disk_gbps: Sourced[float] | None = None
    compute_efficiency: Sourced[float] | None = None
    comm_efficiency: Sourced[float] | None = None
    memory_reserve: Sourced[int] | None = None  # bytes
    on_memory: Sourced[str] = Sourced("fail", "default")
    #: the mean generation length (tokens) for the rollout's throughput; None: the
    #: maximum, gconfig.max_new_tokens (areal_alloc.estimate.rl_step)
    mean_gen_len: Sourced[int] | None = None
    #: a stored calibration may be read (False: ``--no-calibration``; the environment's
    #: AREAL_ALLOC_NO_CALIBRATION is read where the store is, areal_alloc.estimate.calibration)
    use_calibration: bool = True
    #: one node's host memory in bytes and its CPUs (``--host-memory-gib``, ``--host-cpus``,
    #: the hook's parameters, the environment, or this machine's: ``areal_alloc.estimate.host``)
    host_memory: Sourced[int] | None = None
    host_cpus: Sourced[int] | None = None

    def value(self, name: str) -> float | None:
        """A speed or efficiency, or None."""
        found: Sourced[float] | None = getattr(self, name)
        return found.value if found is not None else None

    @property
    def speeds(self) -> GPU | None:
        """The GPU with the speeds given over its catalogue ones; None without a GPU
        and without speeds."""
        from areal_alloc.catalogue import GPU

        peak, hbm, nvlink = (self.value(n) for n in ("peak_tflops", "hbm_tbps", "nvlink_gbps"))
        chosen = self.gpu
        base = chosen.catalogue if chosen is not None else None
        if base is None:
            if peak is None and hbm is None:
                return None
            name = chosen.name if chosen is not None else "GPU"
            base = GPU(name, chosen.capacity / GIB if chosen else 0, "settings")
        if peak is None and hbm is None and nvlink is None:
            return base
        return replace(
            base,
            bf16_tflops=base.bf16_tflops if peak is None else peak,
            hbm_tbps=base.hbm_tbps if hbm is None else hbm,
            nvlink_gbps=base.nvlink_gbps if nvlink is None else nvlink,
        )

    def sources(self, *names: str) -> str:
        """Where the named settings came from, for a message: ``AREAL_ALLOC_HBM_TBPS``."""
        found = [getattr(self, n) for n in names]
        return ", ".join(dict.fromkeys(s.source for s in found if s is not None))


def _given(value: object) -> bool:
    return value is not None and value != ""


@dataclass(frozen=True, slots=True)
class Settings:
    """The settings given outside the experiment, first source first, and whether
    to ask ``nvidia-smi``. ``Settings()`` gives nothing: only a config's keys count."""

    #: (name, value as given, where) in priority order: flags, hook, environment
    given: tuple[tuple[str, object, str], ...] = ()
    detect: bool = False
    #: the experiment's keys are read last (off: a command without an experiment)
    config_keys: bool = field(default=True)
    #: a stored calibration may be read (False: the command's ``--no-calibration``)
    use_calibration: bool = True
    #: top-level keys of an app's own config, not the reference's (the hook's ``app_keys``:
    #: the ``areal-alloc`` app's ``output``), which the strict-key check skips
    app_keys: tuple[str, ...] = ()

    @classmethod
    def from_sources(
        cls,
        flags: Mapping[str, object] | None = None,
        hook: Mapping[str, object] | None = None,
        environ: Mapping[str, str] | None = None,
        detect: bool | None = None,
    ) -> Settings:
        """Flags (``{"gpu": "H800"}``), hook parameters, the environment (default
        ``os.environ``) and detection (default: on unless ``AREAL_ALLOC_DETECT=0``)."""
        env = os.environ if environ is None else environ
        given: list[tuple[str, object, str]] = []
        for name in NAMES:
            if flags is not None and _given(flags.get(name)):
                given.append((name, flags[name], flag(name)))
            if hook is not None and _given(hook.get(name)):
                given.append((name, hook[name], HOOK_PREFIX + name))
            if _given(env.get(env_var(name))):
                given.append((name, env[env_var(name)], env_var(name)))
        if detect is None:
            switch = env.get(DETECT_ENV, "").strip().lower()
            detect = switch not in ("0", "off", "false", "no")
        own = flags.get("app_keys") if flags is not None else None
        if not own and hook is not None:
            own = hook.get("app_keys")
        app_keys = read_names(own) or ()  # a string or a list (the hook checked it)
        return cls(tuple(given), detect, app_keys=app_keys)

    def first(self, name: str) -> tuple[object, str] | None:
        for given, value, source in self.given:
            if given == name:
                return value, source
        return None

    def on_memory(self) -> Sourced[str]:
        """``on_memory`` from the first source that gives it, else ``fail``."""
        found = self.first("on_memory")
        if found is None:
            return Sourced("fail", "default")
        value, source = found
        if value not in ON_MEMORY:
            raise AllocationValidationError(
                f"{source}={shown(value)}: must be 'fail', 'warn' or 'off'"
            )
        return Sourced(str(value), source)

    def reference_version(self) -> str | None:
        """The reference version the experiment's keys are checked against
        (``--reference-version``, ``hydra.callbacks.areal_alloc.reference_version``,
        ``AREAL_ALLOC_REFERENCE_VERSION``): a supported version or ``off``; None when not
        given (the check then takes the newest, areal_alloc.experiment.reference_keys)."""
        found = self.first("reference_version")
        if found is None:
            return None
        from areal_alloc.experiment.reference_keys import choose_version

        return choose_version(*found)

    def resolve(self, cfg: object = None) -> Resolved:
        """Every setting: the first source that gives it, then detection (the GPU),
        then the config's ``cluster`` keys. Raises a one-line error naming the source."""
        cluster = child(cfg, "cluster") if self.config_keys and is_mapping(cfg) else None
        if not is_mapping(cluster):
            cluster = None
        values: dict[str, object] = {}
        for name, (maximum, unit) in _FLOATS.items():
            values[name] = self._float(name, cluster, maximum, unit)
        values["gpu"] = self._gpu(cluster)
        values["memory_reserve"] = self._reserve(cluster)
        values["on_memory"] = self.on_memory()
        values["mean_gen_len"] = self._mean_gen_len()
        values["use_calibration"] = self.use_calibration
        values["host_memory"], values["host_cpus"] = self.host()
        return Resolved(**values)  # type: ignore[arg-type]

    def host(self) -> tuple[Sourced[int] | None, Sourced[int] | None]:
        """One node's host memory (bytes) and CPUs: the first source that gives each
        (``--host-memory-gib`` / ``--host-cpus``, the hook's ``host_memory_gib`` /
        ``host_cpus``, ``AREAL_ALLOC_HOST_MEMORY_GIB`` / ``AREAL_ALLOC_HOST_CPUS``), else
        this machine's when detecting (:func:`detect_host`); never the experiment's keys
        (the reference's loader refuses any it lacks)."""
        memory: Sourced[int] | None = None
        found = self.first("host_memory_gib")
        if found is not None:
            value, source = found
            gib = read_float(
                value, source, minimum=0, maximum=MAX_HOST_MEMORY_GIB, above=True, unit="GiB"
            )
            memory = Sourced(int(gib * GIB), source)
        cpus: Sourced[int] | None = None
        found = self.first("host_cpus")
        if found is not None:
            value, source = found
            cpus = Sourced(read_int(value, source, minimum=1, maximum=MAX_HOST_CPUS), source)
        if self.detect and (memory is None or cpus is None):
            seen_memory, seen_cpus = detect_host()
            memory = memory if memory is not None else seen_memory
            cpus = cpus if cpus is not None else seen_cpus
        return memory, cpus

    def _float(
        self, name: str, cluster: object, maximum: float, unit: str
    ) -> Sourced[float] | None:
        found = self.first(name)
        if found is None and cluster is not None and child(cluster, name) is not None:
            found = child(cluster, name), f"cluster.{name}"
        if found is None:
            return None
        value, source = found
        number = read_float(value, source, minimum=0, maximum=maximum, above=True, unit=unit)
        return Sourced(number, source)

    def _mean_gen_len(self) -> Sourced[int] | None:
        """``--mean-gen-len`` / ``mean_gen_len`` / ``AREAL_ALLOC_MEAN_GEN_LEN`` (never a
        cluster key: the reference's ClusterSpecConfig refuses unknown keys)."""
        found = self.first("mean_gen_len")
        if found is None:
            return None
        value, source = found
        return Sourced(read_int(value, source, minimum=1, maximum=MAX_COUNT), source)

    def _reserve(self, cluster: object) -> Sourced[int] | None:
        found = self.first("memory_reserve_gib")
        if found is None and cluster is not None:
            raw = child(cluster, "memory_reserve_gib")
            found = None if raw is None else (raw, "cluster.memory_reserve_gib")
        if found is None:
            return None
        value, source = found
        gib = read_float(value, source, minimum=0, maximum=MAX_RESERVE_GIB, unit="GiB")
        return Sourced(int(gib * GIB), source)

    def _gpu(self, cluster: object) -> ChosenGPU | None:
        found = self.first("gpu")
        if found is not None:
            value, source = found
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)  # a hook parameter gpu=80 is a size in GiB
            if not isinstance(value, str):
                raise AllocationValidationError(
                    f"{source}={shown(value)}: must be a GPU name such as 'H100-80GB' or its "
                    f"memory in GiB (80)"
                )
            return gpu_from_text(value, source)
        if self.detect:
            detected = detect_gpu()
            if detected is not None:
                return detected
        return _config_gpu(cluster) if cluster is not None else None


def _config_gpu(cluster: object) -> ChosenGPU | None:
    """``cluster.gpu_memory_gib`` (with ``cluster.gpu`` as its label) or ``cluster.gpu``."""
    name = child(cluster, "gpu")
    raw = child(cluster, "gpu_memory_gib")
    if raw is not None:
        gib = read_float(
            raw,
            "cluster.gpu_memory_gib",
            minimum=0,
            maximum=MAX_GPU_MEMORY_GIB,
            above=True,
            unit="GiB",
        )
        label = f"{name} ({gib:g} GiB)" if isinstance(name, str) and name else f"{gib:g} GiB GPU"
        return ChosenGPU(label, int(gib * GIB), "cluster.gpu_memory_gib")
    if name is None or name == "":
        return None
    if not isinstance(name, str):
        raise AllocationValidationError(
            f"cluster.gpu={shown(name)}: must be a GPU name such as 'H100-80GB'"
        )
    from areal_alloc.catalogue import find_gpu, reported_bytes

    try:
        gpu = find_gpu(name)
    except AllocationError as error:
        raise AllocationValidationError(f"cluster.gpu={name!r}: {error.message}") from None
    return ChosenGPU(gpu.name, reported_bytes(gpu), "cluster.gpu", gpu)
