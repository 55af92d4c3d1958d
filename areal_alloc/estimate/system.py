"""The system: one GPU type's speeds, its node, the network between nodes, the
efficiencies real kernels reach, and any stored calibration they come from (Calculon's
system description).

:func:`build_hardware` is the one place a :class:`Hardware` is built from the resolved
settings (``areal_alloc.settings``: the flags, the hook's parameters, the environment,
nvidia-smi, then the config's ``cluster`` keys) and a stored calibration; the plan's pace,
``layouts --rank``, ``suggest`` and ``calibrate`` all take the one it builds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import GPU
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate import calibration
from areal_alloc.numbers import MAX_SPEED, read_float
from areal_alloc.settings import Resolved, gpu_from_text

__all__ = [
    "DEFAULT_COMM_EFFICIENCY",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_DISK_GBPS",
    "DEFAULT_INTER_NODE_GBPS",
    "GPUSpec",
    "Hardware",
    "build_hardware",
    "hardware_assumptions",
    "resolve_gpu",
]

#: Assumed, printed, overridable (--inter-node-gbps, areal_alloc.settings): one 200 Gb/s network
#: port per GPU between nodes.
DEFAULT_INTER_NODE_GBPS = 200.0
#: Assumed, printed, overridable (--disk-gbps, cluster.disk_gbps): the shared file system a
#: disk weight update writes to and reads from (weight_update_mode=disk: the actor saves a
#: HuggingFace checkpoint, the rollout loads it; areal/engine/fsdp_engine.py
#: _update_weights_from_disk, AReaL cbff54d6). No measured figure was found to cite.
DEFAULT_DISK_GBPS = 2.0


#: Assumed fractions of peak that real kernels reach; calibrate them from one
#: measured step (``areal-alloc calibrate``, :mod:`areal_alloc.estimate.calibration`).
#: Compute, and the links' (HBM reads take the links' fraction until calibrated).
DEFAULT_COMPUTE_EFFICIENCY = 0.5
DEFAULT_COMM_EFFICIENCY = 0.7


@dataclass(frozen=True, slots=True)
class Hardware:
    """A GPU's speeds, its node size, the network between nodes, and the efficiencies."""

    name: str
    peak_tflops: float  # dense BF16
    hbm_tbps: float
    nvlink_gbps: float | None  # per GPU, both directions together (as published)
    gpus_per_node: int
    inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS  # per GPU, gigabits per second
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    comm_efficiency: float = DEFAULT_COMM_EFFICIENCY
    hbm_efficiency: float = DEFAULT_COMM_EFFICIENCY
    #: A stored calibration these efficiencies come from (``calibration.describe``), or "".
    calibration: str = ""
    disk_gbps: float = DEFAULT_DISK_GBPS  # the file system a disk weight update crosses

    def __post_init__(self) -> None:
        # the one reader of numbers, with the bounds the flags and cluster keys have
        for name in ("peak_tflops", "hbm_tbps", "inter_node_gbps", "nvlink_gbps", "disk_gbps"):
            value = getattr(self, name)
            if value is not None or name != "nvlink_gbps":
                read_float(value, f"{self.name}: {name}", minimum=0, maximum=MAX_SPEED, above=True)
        for name in ("compute_efficiency", "comm_efficiency", "hbm_efficiency"):
            value = getattr(self, name)
            read_float(value, f"{self.name}: {name}", minimum=0, maximum=1, above=True)
        if self.gpus_per_node < 1:
            raise AllocationValidationError(f"{self.name}: gpus_per_node must be ≥ 1")

    @classmethod
    def from_gpu(
        cls,
        gpu: GPU,
        gpus_per_node: int,
        *,
        inter_node_gbps: float | None = None,
        compute_efficiency: float | None = None,
        comm_efficiency: float | None = None,
        hbm_efficiency: float | None = None,
        disk_gbps: float | None = None,
    ) -> Hardware:
        """A catalogue GPU's published speeds; the cluster's network and efficiencies."""
        missing = [name for name in ("bf16_tflops", "hbm_tbps") if getattr(gpu, name) is None]
        if missing:
            raise AllocationValidationError(
                f"{gpu.name}: no published {' and '.join(missing)} in the catalogue; give "
                f"--peak-tflops and --hbm-tbps (in a config: cluster.peak_tflops and "
                f"cluster.hbm_tbps)"
            )
        return cls(
            gpu.name,
            float(gpu.bf16_tflops or 0),
            float(gpu.hbm_tbps or 0),
            gpu.nvlink_gbps,
            gpus_per_node,
            DEFAULT_INTER_NODE_GBPS if inter_node_gbps is None else inter_node_gbps,
            DEFAULT_COMPUTE_EFFICIENCY if compute_efficiency is None else compute_efficiency,
            DEFAULT_COMM_EFFICIENCY if comm_efficiency is None else comm_efficiency,
            DEFAULT_COMM_EFFICIENCY if hbm_efficiency is None else hbm_efficiency,
            disk_gbps=DEFAULT_DISK_GBPS if disk_gbps is None else disk_gbps,
        )

    def link_bytes_per_second(self, inside_node: bool, members_per_node: int = 1) -> float:
        """One direction, per GPU, at the achievable fraction.

        Across nodes, a ring collective (all-gather, reduce-scatter, all-reduce) of a
        group with ``members_per_node`` GPUs in each node runs one ring per member, each
        leaving the node through its own GPU's network port: its bus bandwidth is the
        node's ports for the group together, up to NVLink's (NCCL's own figures:
        "theoretical performance is 100GB/s (200G x 4 / 8)" for four 200 Gb/s ports per
        eight A100s, NVIDIA/nccl-tests#119; 96 GB/s, measured 86, in NVIDIA/nccl#1048).
        A point-to-point send (``members_per_node`` 1) has one GPU's port.
        """
        nvlink = self.nvlink_gbps / 2 * 1e9 * self.comm_efficiency if self.nvlink_gbps else None
        if inside_node and nvlink:
            return nvlink
        network = members_per_node * self.inter_node_gbps / 8 * 1e9 * self.comm_efficiency
        return min(network, nvlink) if nvlink and members_per_node > 1 else network

    def link_name(self, inside_node: bool, members_per_node: int = 1) -> str:
        if inside_node and self.nvlink_gbps:
            return f"NVLink {self.nvlink_gbps / 2:g} GB/s"
        if members_per_node > 1:
            return f"network {members_per_node} ports × {self.inter_node_gbps:g} Gb/s per node"
        return f"network {self.inter_node_gbps:g} Gb/s"


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    capacity: int  # bytes


def resolve_gpu(text: str) -> GPUSpec:
    """A catalogue GPU name (``H100-80GB``) or a memory size in GiB (``80``, ``80GiB``)."""
    chosen = gpu_from_text(text)
    return GPUSpec(chosen.name, chosen.capacity)


def build_hardware(
    settings: Resolved,
    gpus_per_node: int,
    arch: Architecture | None,
    *,
    use_calibration: bool = True,
    off: str = calibration.OFF_ANYWHERE,
) -> Hardware | None:
    """The GPU's speeds (``areal_alloc.settings``: a flag, the hook, the environment,
    nvidia-smi or the config's ``cluster`` keys), else None; efficiencies from the
    settings, else a stored calibration of ``arch`` on this GPU (unless
    ``use_calibration`` is false), which :attr:`Hardware.calibration` then names with
    ``off``, how to turn it off."""
    gpu = settings.speeds
    if gpu is None or gpu.bf16_tflops is None or gpu.hbm_tbps is None:
        return None
    use_calibration = use_calibration and settings.use_calibration  # --no-calibration
    stored = calibration.load(arch, gpu.name) if arch is not None and use_calibration else None
    compute = settings.value("compute_efficiency")
    used = "" if stored is None else calibration.describe(stored, use_compute=compute is None)
    if compute is None and stored is not None:
        compute = stored.compute_efficiency
    try:
        hardware = Hardware.from_gpu(
            gpu,
            gpus_per_node,
            inter_node_gbps=settings.value("inter_node_gbps"),
            compute_efficiency=compute,
            comm_efficiency=settings.value("comm_efficiency"),
            hbm_efficiency=stored.hbm_efficiency if stored else None,
            disk_gbps=settings.value("disk_gbps"),
        )
    except AllocationError as error:
        where = settings.sources("gpu", "peak_tflops", "hbm_tbps") or "cluster"
        raise AllocationValidationError(f"{where}: {error.message}") from None
    # a stored calibration is named wherever it changes an estimate
    return replace(hardware, calibration=f"{used} ({off})") if used else hardware


def hardware_assumptions(hardware: Hardware) -> tuple[str, ...]:
    return (
        f"{hardware.name}: {hardware.peak_tflops:g} TFLOP/s BF16 at "
        f"{hardware.compute_efficiency:.3g}, links at {hardware.comm_efficiency:.3g} and HBM at "
        f"{hardware.hbm_efficiency:.3g} of their peaks; {hardware.inter_node_gbps:g} Gb/s "
        f"per GPU between nodes",
    )
