"""Host (CPU) memory and CPUs per node: what the schedulers are asked for, and what the run
keeps in host memory, term by term, against one node's memory and CPUs.

Two checks per node, each against the host's figures (``areal_alloc.settings``:
``--host-memory-gib`` / ``--host-cpus``, the hook's ``host_memory_gib`` / ``host_cpus``,
``AREAL_ALLOC_HOST_MEMORY_GIB`` / ``AREAL_ALLOC_HOST_CPUS``, or this machine's):

**What the scheduler is asked for** (``scheduler.type`` ray or slurm; the local scheduler
reads ``cpu`` only for its threads' environment and ``mem`` not at all,
areal/infra/scheduler/local.py l.749, AReaL cbff54d6). Each separated engine's workers
ask ``scheduling_spec[0].cpu`` CPUs and ``mem`` GB (× 1024**3 bytes) per GPU: the train
controller one worker per rank (areal/infra/controller/train_controller.py l.277-281), the
rollout controller one per instance with the spec × the instance's GPUs
(rollout_controller.py l.183-190); ``RayScheduler._build_node_plan`` asks one bundle per
node of ``cpu × workers_on_node`` CPUs and ``mem × workers_on_node × 1024**3`` bytes, and a
spec with ``gpu: 0`` one CPU-and-memory bundle for every worker (areal/infra/scheduler/
ray.py l.1389-1470); the Slurm scheduler ``--cpus-per-task`` and ``--mem={mem × 1024 ×
ntasks_per_node}M`` (scheduler/slurm.py l.848-856, 1066-1075). A colocated engine reuses
its target's workers and asks nothing more (ray.py l.1516-1560; slurm.py l.1020-1040). Ray
offers as its ``memory`` resource what the object store leaves (:func:`ray_memory`); a
placement group that does not fit never forms and the RayScheduler stops after its start-up
timeout with "Ray placement group timeout" (ray.py l.1331-1379).

The legacy SPMD launchers (``python -m areal.infra.launcher.ray``: the SGLang task taking a
whole node's ``cpu × n_gpus_per_node``, launcher/ray.py l.413-476) parse
``allocation_mode`` only (l.387-388, ``_AllocationMode.from_str``), which areal-alloc refuses
(``areal_alloc.legacy``): a config that passes here runs under the single controller, whose
scheduler ``scheduler.type`` names.

**What the run keeps in host memory**, per phase (the peak counts), under any scheduler:

- torch_memory_saver's CPU backups (``enable_offload``: ``TMS_INIT_ENABLE_CPU_BACKUP=1``,
  areal/utils/offload.py l.29-47): each training engine the reference offloads
  (``engines.offloaded_while``) copies what it keeps on its GPUs (the GPU estimate's
  weights, gradients and optimizer states per rank, ``MemoryEstimate.resident``) to the host
  while it is paused; a Megatron engine with ``megatron.disable_grad_buffers_cpu_backup``
  without its gradients (cli_args.py l.1089-1096);
- ``fsdp.offload_params`` (``CPUOffloadPolicy``, fsdp_engine.py l.406-408): the rank's
  shard of parameters, gradients and Adam states in ``optimizer_dtype``, in every phase;
- ``fsdp.memory_efficient_load``: rank 0 builds the model on the CPU in ``optimizer_dtype``
  (fsdp_engine.py l.1048-1057; a vision model on every rank, not modelled here);
- a disk weight update of an FSDP actor: ``_save_full_model_to_hf`` gathers the full state
  dict to rank 0's CPU, then casts it to ``dtype`` (fsdp_engine.py l.1787-1806);
- vLLM asleep (the reference's ``/sleep`` sends no level, vLLM's default is 1:
  areal/engine/vllm_remote.py l.268-277; vllm/entrypoints/serve/sleep/api_router.py,
  vllm-project/vllm@98473e23): level 1 "offload[s] the model weights" to CPU memory
  (docs/features/sleep_mode.md, vllm-project/vllm@e793b9a7);
- ``cpu_offload_gb`` of either server, per GPU ("The space in GiB to offload to CPU, per
  GPU", vllm/config/cache.py, vllm-project/vllm@c1d86421; SGLang "How many GBs of RAM to
  reserve for CPU offloading", python/sglang/srt/server_args.py,
  sgl-project/sglang@469c63e5).

Over the host: refused, but only for figures given (a flag, the hook, the environment): a
detected figure is this machine's, where the check runs (a laptop, a login node), a guess
of a node's, so it warns. Within :data:`NEAR` of it: a warning — the kernel's OOM killer
and Ray's memory monitor act before 100 % (``RAY_memory_usage_threshold``, slime#1851:
"exceeds the memory usage threshold of 0.99").
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from areal_alloc.estimate.backends import server_model, training_model
from areal_alloc.estimate.engines import offloaded_while
from areal_alloc.estimate.execution import GIB
from areal_alloc.estimate.memory import DTYPE_BYTES, readable_bytes, short_count

if TYPE_CHECKING:
    from typing import Protocol

    from areal_alloc.estimate.memory import MemoryEstimate
    from areal_alloc.experiment.read import Experiment
    from areal_alloc.model import ModelAllocation
    from areal_alloc.placement import Placement
    from areal_alloc.settings import Sourced

    class HostEngine(Protocol):
        """What the host estimate needs of an engine (``plan.EnginePlan`` is one)."""

        @property
        def key(self) -> str: ...
        @property
        def allocation(self) -> ModelAllocation: ...
        @property
        def active(self) -> bool: ...
        @property
        def memory(self) -> MemoryEstimate | None: ...


__all__ = [
    "NEAR",
    "RAY_OBJECT_STORE_FRACTION",
    "RAY_OBJECT_STORE_MAX_BYTES",
    "HostEstimate",
    "HostTerm",
    "NodeGroup",
    "estimate_host",
    "ray_memory",
]

#: Ray's object store takes this share of the memory available when a node starts, at most
#: :data:`RAY_OBJECT_STORE_MAX_BYTES` (``DEFAULT_OBJECT_STORE_MEMORY_PROPORTION = 0.3``,
#: ``DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES = 200 * 10**9``, python/ray/_private/
#: ray_constants.py, ray-project/ray@56b106df); the ``memory`` resource tasks and placement
#: groups ask for is what remains (``memory = avail_memory - object_store_memory``, less
#: Redis's share on the head node: ``ResourceSpec.resolve``, python/ray/_private/
#: resource_spec.py, ray-project/ray@a53f00f4).
RAY_OBJECT_STORE_FRACTION = 0.3
RAY_OBJECT_STORE_MAX_BYTES = 200 * 10**9
#: A total within this share of the host's figure warns (B9): the OOM killer and Ray's
#: memory monitor act before 100 %.
NEAR = 0.10
#: The bytes of one "GB" of ``scheduling_spec.mem``: the schedulers multiply by 1024**3
#: (ray.py l.1393-1395, l.1448; slurm.py: × 1024 MB).
SPEC_GB = 1 << 30
#: Phases of host memory in use (the peak counts): the training engines load; the rollout
#: generates (what is offloaded meanwhile is backed up); the actor trains and its weights
#: reach the servers (a disk update, a sleeping vLLM).
PHASES = ("load", "generation", "update")
#: The kinds of request a scheduler is asked for.
REQUEST = "request"
CPUS = "cpus"


def ray_memory(host: int) -> int:
    """Ray's ``memory`` resource on a node of ``host`` bytes, at most: what the object
    store (:data:`RAY_OBJECT_STORE_FRACTION`, at most :data:`RAY_OBJECT_STORE_MAX_BYTES`)
    leaves of it (less still: Ray counts the memory free when it starts)."""
    return host - min(int(host * RAY_OBJECT_STORE_FRACTION), RAY_OBJECT_STORE_MAX_BYTES)


@dataclass(frozen=True, slots=True)
class HostTerm:
    """One part of a node's host figures: its amount (bytes; CPUs for a ``cpus`` term)
    and the formula with its inputs.

    ``kind``: ``request`` (memory asked of the scheduler), ``cpus`` (CPUs asked of it),
    or ``memory`` (host memory in use in ``phases``)."""

    rule: str
    engine: str
    name: str
    amount: int
    formula: str
    kind: str = "memory"
    phases: tuple[str, ...] = ()
    #: the GPUs a request multiplies its per-GPU figure by (0: not a request)
    count: int = 0

    @property
    def shown(self) -> str:
        """``actor.scheduling_spec[0].mem 256.0 GiB (32 GB × 8 GPUs)``."""
        amount = f"{self.amount:,}" if self.kind == CPUS else readable_bytes(self.amount)
        return f"{self.name} {amount} ({self.formula})"


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """Nodes ``first``…``last`` (inclusive), each with the same terms."""

    first: int
    last: int
    terms: tuple[HostTerm, ...]

    @property
    def label(self) -> str:
        return (
            f"node {self.first}" if self.first == self.last else f"nodes {self.first}–{self.last}"
        )

    def of(self, kind: str, phase: str | None = None) -> tuple[HostTerm, ...]:
        return tuple(
            t for t in self.terms if t.kind == kind and (phase is None or phase in t.phases)
        )

    def total(self, kind: str, phase: str | None = None) -> int:
        return sum(t.amount for t in self.of(kind, phase))

    @property
    def peak(self) -> tuple[str, int]:
        """The phase of the most host memory in use, and its bytes (the later of equals)."""
        return max(
            ((p, self.total("memory", p)) for p in PHASES),
            key=lambda item: (item[1], PHASES.index(item[0])),
        )


@dataclass(frozen=True, slots=True)
class HostEstimate:
    """Per node: the scheduler's requests and the host memory in use, with the verdicts."""

    scheduler: str | None
    memory: Sourced[int] | None
    cpus: Sourced[int] | None
    groups: tuple[NodeGroup, ...] = ()
    refusals: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def terms(self) -> bool:
        return any(g.terms for g in self.groups)

    @property
    def ray_memory(self) -> int | None:
        if self.scheduler != "ray" or self.memory is None:
            return None
        return ray_memory(self.memory.value)

    def to_dict(self) -> dict[str, object]:
        return {
            "scheduler": self.scheduler,
            "memory": self.memory.value if self.memory is not None else None,
            "memory_source": self.memory.source if self.memory is not None else None,
            "memory_origin": self.memory.origin if self.memory is not None else None,
            "cpus": self.cpus.value if self.cpus is not None else None,
            "cpus_source": self.cpus.source if self.cpus is not None else None,
            "ray_memory": self.ray_memory,
            "nodes": [
                {
                    "first": g.first,
                    "last": g.last,
                    "requested_memory": g.total(REQUEST),
                    "requested_cpus": g.total(CPUS),
                    "peak_phase": g.peak[0],
                    "peak_memory": g.peak[1],
                    "terms": [
                        {
                            "rule": t.rule,
                            "engine": t.engine,
                            "name": t.name,
                            "kind": t.kind,
                            "amount": t.amount,
                            "formula": t.formula,
                            "phases": list(t.phases),
                        }
                        for t in g.terms
                    ],
                }
                for g in self.groups
            ],
            "refusals": list(self.refusals),
            "warnings": list(self.warnings),
        }


# --- where each engine's GPUs are ----------------------------------------------------------


def _runs(engine: HostEngine, placements: Sequence[Placement]) -> tuple[tuple[int, int], ...]:
    """The global GPUs of ``engine``: its own placement, or (colocated) the first GPUs of
    its target's, as many as its world size."""
    for placed in placements:
        if placed.key == engine.key:
            return placed.runs
    for placed in placements:
        if engine.key in placed.shared_with:
            want, runs = engine.allocation.parallel.world_size, []
            for start, stop in placed.runs:
                take = min(stop - start, want)
                if take > 0:
                    runs.append((start, start + take))
                want -= take
            return tuple(runs)
    return ()


def _segments(runs: tuple[tuple[int, int], ...], per_node: int) -> list[tuple[int, int, int]]:
    """(first node, last node, GPUs on each) covering ``runs``: a partial first node, the
    whole nodes between, a partial last node."""
    out: list[tuple[int, int, int]] = []
    for start, stop in runs:
        first, last = start // per_node, (stop - 1) // per_node
        if first == last:
            out.append((first, first, stop - start))
            continue
        out.append((first, first, (first + 1) * per_node - start))
        if last - first > 1:
            out.append((first + 1, last - 1, per_node))
        out.append((last, last, stop - last * per_node))
    return out


def _on(segments: list[tuple[int, int, int]], node: int) -> int:
    return sum(count for first, last, count in segments if first <= node <= last)


# --- the terms ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Engine:
    """One active engine with what its terms need."""

    index: int
    key: str
    path: str
    segments: list[tuple[int, int, int]]
    first_node: int
    world: int
    colocated: bool
    engine: HostEngine


def _plural(n: int, what: str) -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "s")


def _request_terms(
    e: _Engine, g: int, node: int, experiment: Experiment, scheduler: str
) -> list[HostTerm]:
    """B1 and B3: ``scheduling_spec[0]`` cpu and mem, as the scheduler multiplies them."""
    if e.colocated:
        return []
    spec = experiment.scheduling.spec(e.key)
    key = f"{e.path}.scheduling_spec[0]"
    if spec.gpu <= 0:  # one bundle for every worker (ray.py l.1392-1396), on one node
        if node != e.first_node:
            return []
        count, why = e.world, f"{_plural(e.world, 'GPU')} of workers in one bundle (gpu 0)"
    else:
        count, why = g, _plural(g, "GPU")
    return [
        HostTerm(
            "B1",
            e.key,
            f"{key}.mem",
            spec.mem * count * SPEC_GB,
            f"{spec.mem} GB × {why}",
            REQUEST,
            count=count,
        ),
        HostTerm(
            "B1", e.key, f"{key}.cpu", spec.cpu * count, f"{spec.cpu} × {why}", CPUS, count=count
        ),
    ]


def _memory_terms(
    e: _Engine,
    g: int,
    node: int,
    experiment: Experiment,
    phases_off: tuple[str, ...],
) -> list[HostTerm]:
    """B4-B8: what ``e`` keeps in host memory on a node where it has ``g`` GPUs."""
    out: list[HostTerm] = []
    memory = e.engine.memory
    read = experiment.get(e.key)
    training = read.training if read is not None else None
    backend = e.engine.allocation.backend
    arch = read.model.architecture()[0] if read is not None and read.model.named else None
    gpus = _plural(g, "GPU")
    if (
        training is not None
        and memory is not None
        and experiment.startup.enable_offload
        and phases_off
    ):
        backup = memory.resident
        what = "weights + gradients + optimizer states"
        megatron = training_model(backend).sharding == "megatron"
        if megatron and e.key in experiment.scheduling.no_grad_backup:
            backup -= memory.term("gradients")
            what = "weights + optimizer states (disable_grad_buffers_cpu_backup)"
        if backup > 0:
            out.append(
                HostTerm(
                    "B4",
                    e.key,
                    f"{e.key} torch_memory_saver backup",
                    backup * g,
                    f"{what} {readable_bytes(backup)} per GPU × {gpus}, while offloaded",
                    phases=phases_off,
                )
            )
    if arch is not None and training is not None and training_model(backend).fsdp_engine:
        params = arch.parameters.total
        opt = DTYPE_BYTES.get(training.optimizer_dtype.lower(), 4)
        if training.offload_params:
            per_param = opt * (4 if training.optimizer is not None else 1)
            share = -(-params * per_param // e.world)
            held = "parameter, gradient and 2 Adam states" if training.optimizer else "parameter"
            out.append(
                HostTerm(
                    "B5",
                    e.key,
                    f"{e.path}.fsdp.offload_params",
                    share * g,
                    f"{per_param} B ({held} in {training.optimizer_dtype}) × "
                    f"{short_count(params)} parameters / {e.world} ranks × {gpus}",
                    phases=PHASES,
                )
            )
        if training.memory_efficient_load and node == e.first_node:
            out.append(
                HostTerm(
                    "B6",
                    e.key,
                    f"{e.path}.fsdp.memory_efficient_load",
                    params * opt,
                    f"rank 0 builds the model on the CPU: {short_count(params)} parameters × "
                    f"{opt} B ({training.optimizer_dtype})",
                    phases=("load",),
                )
            )
        if e.key == "actor" and experiment.transport == "disk" and node == e.first_node:
            dtype = DTYPE_BYTES.get(training.dtype.lower(), 2)
            out.append(
                HostTerm(
                    "B7",
                    e.key,
                    "actor disk weight update",
                    params * (opt + dtype),
                    f"the full state dict on rank 0's CPU, then cast: {short_count(params)} "
                    f"parameters × ({opt} + {dtype}) B",
                    phases=("update",),
                )
            )
    if e.engine.allocation.is_inference and memory is not None:
        weights = memory.term("weights")
        if server_model(backend).sleeps_to_host and "update" in phases_off and weights:
            out.append(
                HostTerm(
                    "B8",
                    e.key,
                    f"{e.key} vLLM sleep level 1",
                    weights * g,
                    f"weights {readable_bytes(weights)} per GPU × {gpus}, while asleep",
                    phases=("update",),
                )
            )
    server = experiment[e.key].inference if e.engine.allocation.is_inference else None
    if server is not None:
        gib = server.cpu_offload_gb
        if gib:
            out.append(
                HostTerm(
                    "B8",
                    e.key,
                    f"{backend}.cpu_offload_gb ({e.key})",
                    int(gib * GIB) * g,
                    f"{gib:g} GiB per GPU × {gpus}",
                    phases=PHASES,
                )
            )
    return out


def _phases_off(experiment: Experiment, index: int) -> tuple[str, ...]:
    """The phases engine ``index`` spends offloaded: while the rollout generates, while the
    actor trains (``engines.offloaded_while``)."""
    keys = [e.key for e in experiment.engines]
    out: list[str] = []
    for phase, runner in (("generation", "rollout"), ("update", "actor")):
        if (
            runner in keys
            and keys.index(runner) != index
            and offloaded_while(experiment, keys.index(runner), index) is not None
        ):
            out.append(phase)
    return tuple(out)


# --- the verdicts ---------------------------------------------------------------------------


def _listed(terms: Sequence[HostTerm]) -> str:
    return " + ".join(t.shown for t in terms)


def _judge(
    group: NodeGroup,
    scheduler: str | None,
    memory: Sourced[int] | None,
    cpus: Sourced[int] | None,
) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for one group of nodes: a total over a given figure is refused,
    over a detected one (this machine's, a guess of a node's) warned of; within
    :data:`NEAR` of either warned of."""
    refusals: list[str] = []
    warnings: list[str] = []
    where = group.label + (" (each)" if group.first != group.last else "")

    def check(
        figure: Sourced[int],
        total: int,
        limit: int,
        what: str,
        terms: Sequence[HostTerm],
        limit_text: str,
        then: str,
        fix: str,
    ) -> None:
        listed = f"{where}: {what} {_amount(total, terms)} = {_listed(terms)}"
        if total > limit:
            line = f"{listed}, over {limit_text}; {then}; {fix}"
            if figure.detected:
                warnings.append(
                    f"{line} (this machine's figure, a guess of a node's: give "
                    f"--host-memory-gib / --host-cpus, or the hook's host_memory_gib / "
                    f"host_cpus, to check against a node's)"
                )
            else:
                refusals.append(line)
        elif total > limit * (1 - NEAR):
            warnings.append(
                f"{listed}, within {NEAR:.0%} of {limit_text}: the OOM killer or Ray's memory "
                f"monitor may act first"
            )

    if memory is not None and scheduler in ("ray", "slurm") and group.of(REQUEST):
        host = memory.value
        if scheduler == "ray":
            limit = ray_memory(host)
            text = (
                f"the {readable_bytes(limit)} Ray offers as its memory resource on a node of "
                f"{readable_bytes(host)} ({memory.origin}; the RAM less the object store's "
                f"{RAY_OBJECT_STORE_FRACTION:.0%}, at most "
                f"{RAY_OBJECT_STORE_MAX_BYTES / 1e9:g} GB)"
            )
        else:
            limit = host
            text = f"the node's {readable_bytes(host)} ({memory.origin})"
        check(
            memory,
            group.total(REQUEST),
            limit,
            "the scheduler is asked for",
            group.of(REQUEST),
            text,
            _NEVER[scheduler],
            _lower(group.of(REQUEST), limit, SPEC_GB, "mem", "GB"),
        )
    if cpus is not None and scheduler in ("ray", "slurm") and group.of(CPUS):
        check(
            cpus,
            group.total(CPUS),
            cpus.value,
            "the scheduler is asked for",
            group.of(CPUS),
            f"the node's {cpus.value:,} CPUs ({cpus.origin})",
            _NEVER[scheduler],
            _lower(group.of(CPUS), cpus.value, 1, "cpu", "CPUs"),
        )
    if memory is not None:
        phase, total = group.peak
        terms = group.of("memory", phase)
        if terms:
            check(
                memory,
                total,
                memory.value,
                f"host memory in use ({phase})",
                terms,
                f"the node's {readable_bytes(memory.value)} ({memory.origin})",
                "the kernel's OOM killer (or Ray's memory monitor) ends the run",
                _memory_fix(terms),
            )
    return refusals, warnings


#: What a scheduler does with a request no node can meet.
_NEVER = {
    "ray": (
        'the placement group never forms and the scheduler stops: "Ray placement group '
        "timeout, please check if the resource requirement for your experiment exceeds the "
        'available resources in the cluster"'
    ),
    "slurm": "Slurm cannot give one node that much: the job is refused or never starts",
}


def _lower(terms: Sequence[HostTerm], limit: int, unit: int, key: str, what: str) -> str:
    """``set scheduling_spec[0].mem to 22 GB per GPU or less`` (the most that fits) …"""
    gpus = sum(t.count for t in terms)
    most = limit // (unit * gpus) if gpus else 0
    engines = ", ".join(dict.fromkeys(t.name for t in terms))
    if most < 1:
        return f"use nodes with more {'memory' if key == 'mem' else 'CPUs'} ({engines})"
    return (
        f"set {engines} to {most:,} {what} per GPU or less, or use nodes with more "
        f"{'memory' if key == 'mem' else 'CPUs'}"
    )


def _amount(total: int, terms: Sequence[HostTerm]) -> str:
    return f"{total:,} CPUs" if terms and terms[0].kind == CPUS else readable_bytes(total)


def _memory_fix(terms: Sequence[HostTerm]) -> str:
    rules = {t.rule for t in terms}
    fixes = []
    if "B4" in rules:
        fixes.append("offload fewer engines or spread them over more nodes")
    if "B5" in rules:
        fixes.append("set fsdp.offload_params=false")
    if any(t.rule == "B8" and t.name.endswith("cpu_offload_gb") for t in terms):
        fixes.append("lower cpu_offload_gb")
    if any(t.rule == "B8" and t.name.endswith("sleep level 1") for t in terms):
        fixes.append("give the sleeping vLLM's weights a host with more memory, or separate it")
    if "B7" in rules:
        fixes.append("use weight_update_mode xccl")
    return "; ".join(fixes) or "use nodes with more memory"


# --- the estimate ---------------------------------------------------------------------------


def estimate_host(
    experiment: Experiment,
    engines: Sequence[HostEngine],
    placements: Sequence[Placement],
    memory: Sourced[int] | None,
    cpus: Sourced[int] | None,
) -> HostEstimate | None:
    """Each node's terms and the verdicts; None when nothing applies and no host is known."""
    per_node = experiment.cluster.n_gpus_per_node
    kind = experiment.startup.scheduler_type
    scheduler = kind if kind in ("local", "ray", "slurm") else None
    if per_node <= 0:
        return None
    paths = {e.key: e.path for e in experiment.engines}
    active: list[_Engine] = []
    for index, engine in enumerate(engines):
        if not engine.active:
            continue
        runs = _runs(engine, placements)
        if not runs:
            continue
        strategy = engine.allocation.scheduling_strategy
        active.append(
            _Engine(
                index,
                engine.key,
                paths.get(engine.key, engine.key),
                _segments(runs, per_node),
                runs[0][0] // per_node,
                engine.allocation.parallel.world_size,
                strategy.is_colocated,
                engine,
            )
        )
    # node intervals on which every engine's GPU count is the same
    marks = {0}
    for e in active:
        marks.add(e.first_node)
        marks.add(e.first_node + 1)
        for first, last, _ in e.segments:
            marks.update((first, last + 1))
    n_nodes = experiment.cluster.n_nodes
    bounds = [*sorted(m for m in marks if m < n_nodes), n_nodes]
    offs = {e.index: _phases_off(experiment, e.index) for e in active}
    groups: list[NodeGroup] = []
    for lo, hi in itertools.pairwise(bounds):
        terms: list[HostTerm] = []
        for e in active:
            g = _on(e.segments, lo)
            if g == 0 and lo != e.first_node:
                continue
            if scheduler in ("ray", "slurm"):
                terms.extend(_request_terms(e, g, lo, experiment, scheduler))
            if g:
                terms.extend(_memory_terms(e, g, lo, experiment, offs[e.index]))
        if groups and groups[-1].terms == tuple(terms) and groups[-1].last == lo - 1:
            groups[-1] = NodeGroup(groups[-1].first, hi - 1, groups[-1].terms)
        else:
            groups.append(NodeGroup(lo, hi - 1, tuple(terms)))
    groups = [g for g in groups if g.terms]
    if not groups and memory is None and cpus is None:
        return None
    refusals: list[str] = []
    warnings: list[str] = []
    for group in groups:
        over, near = _judge(group, scheduler, memory, cpus)
        refusals.extend(over)
        warnings.extend(near)
    if scheduler in ("ray", "slurm"):
        for e in active:
            spec = experiment.scheduling.spec(e.key)
            if not e.colocated and spec.gpu <= 0:
                warnings.append(
                    f"{e.path}.scheduling_spec[0].gpu={spec.gpu} (SchedulingSpec's default) under "
                    f"scheduler.type={scheduler}: the scheduler asks one bundle of CPUs and "
                    f"memory for all {e.world} workers of {e.key}, on one node, and no GPU "
                    f"(areal/infra/scheduler/ray.py _build_node_plan l.1392-1396, slurm.py "
                    f"--gres only for GPUs); write scheduling_spec: [{{gpu: 1, …}}] as the "
                    f"reference's examples do"
                )
    return HostEstimate(scheduler, memory, cpus, tuple(groups), tuple(refusals), tuple(warnings))
