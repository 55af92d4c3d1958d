"""The vocabulary every layer shares: backends, dimensions, engines, and the rule messages.

This module imports nothing of areal-alloc's. A new backend is a row of
:data:`BACKEND_DIMS` (and of :data:`INFERENCE_BACKENDS` or
:data:`TRAINING_BACKENDS`); a new dimension letter is a row of :data:`DIM_NAMES`
plus its field in ``strategy.ParallelStrategy``; a new engine is a row of
:data:`ENGINE_ROLES`. Each rule's message lives here once, so the parser, the
models and the plan word it the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from areal_alloc.errors import shown

__all__ = [
    "BACKEND_DIMS",
    "DEFAULT_ORDER",
    "DIM_NAMES",
    "ENGINE_ORDER",
    "ENGINE_ROLES",
    "EXAMPLE_BACKEND",
    "HYBRID_BACKENDS",
    "IDENTIFIER",
    "INFERENCE_BACKENDS",
    "INHERITS_ACTOR",
    "PART_DIMS",
    "SCHEDULING_KEYS",
    "SCHEDULING_TYPES",
    "SETTING_NAMES",
    "TRAINING_BACKENDS",
    "colocation_size_problem",
    "describe_backends",
    "did_you_mean",
    "dimension_not_supported",
    "missing_hybrid_backend",
    "name_problem",
    "role_problem",
    "scheduling_problem",
    "unknown_backend",
]

#: Dimension letter -> what it splits.
DIM_NAMES: dict[str, str] = {
    "d": "data",
    "t": "tensor",
    "p": "pipeline",
    "c": "context",
    "e": "expert",
}

INFERENCE_BACKENDS: tuple[str, ...] = ("sglang", "vllm")
TRAINING_BACKENDS: tuple[str, ...] = ("fsdp", "megatron", "archon")
HYBRID_BACKENDS: tuple[str, ...] = ("megatron", "archon")

#: Backend -> the dimension letters it takes (size 1 is accepted for any letter).
BACKEND_DIMS: dict[str, str] = {
    "sglang": "dtp",
    "vllm": "dtp",
    "fsdp": "dtc",
    "megatron": "dtpce",
    "archon": "dtpce",
}

#: The two parts of a hybrid layout and the letters each takes; attn comes first.
PART_DIMS: dict[str, str] = {"attn": "dtpc", "ffn": "dtpe"}

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: Engine key -> the kind of backend it runs ("any": either; the teacher decides by its
#: engine_type). The order is the placement order: inference first, as the launchers do.
ENGINE_ROLES: dict[str, str] = {
    "rollout": "inference",
    "teacher": "any",
    "actor": "training",
    "critic": "training",
    "ref": "training",
}
ENGINE_ORDER: tuple[str, ...] = tuple(ENGINE_ROLES)
#: Engines whose empty backend takes actor.backend.
INHERITS_ACTOR: tuple[str, ...] = ("critic", "ref")
#: A backend to suggest for each role.
EXAMPLE_BACKEND: dict[str, str] = {
    "inference": "sglang:d1t2",
    "training": "fsdp:d4",
    "any": "fsdp:d4",
}

#: The keys of the reference's SchedulingStrategy (areal/api/cli_args.py).
SCHEDULING_KEYS: tuple[str, ...] = ("type", "target", "fork")
SCHEDULING_TYPES: tuple[str, ...] = ("separation", "colocation")

#: Megatron-core's default rank order; the reference's engine passes it too.
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'fsdp'? "`` for a close choice, else ``""``."""
    import difflib  # only on a mistake; most runs never need it

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f"did you mean {close[0]!r}? " if close else ""


def describe_backends() -> str:
    return f"{', '.join(TRAINING_BACKENDS)} (training); {', '.join(INFERENCE_BACKENDS)} (inference)"


def unknown_backend(backend: str) -> str:
    """The message for a backend name that is not one of ours, with the nearest one."""
    if backend.lower() in BACKEND_DIMS:
        return f"backend names are lower case: write {backend.lower()!r}, not {backend!r}"
    hint = did_you_mean(backend.lower(), BACKEND_DIMS) if len(backend) <= 60 else ""
    return f"unknown backend {shown(backend)}; {hint}backends are {describe_backends()}"


def dimension_not_supported(backend: str, letter: str, size: int) -> str:
    """The message for a dimension ``letter`` of ``size`` > 1 that ``backend`` refuses."""
    what = f"{DIM_NAMES[letter]} parallelism ({letter}{size})"
    if backend == "fsdp":
        return (
            f"FSDP backend only supports data/tensor/context parallelism (d, t, c), "
            f"got {what}; use megatron or archon for {letter}"
        )
    if backend in INFERENCE_BACKENDS:
        return f"{backend} does not support {what}; inference backends take d, t, p"
    return f"{backend} does not support {what}"  # pragma: no cover - all take every dim


def missing_hybrid_backend(layout: str) -> str:
    """The message for a hybrid ``(attn:…|ffn:…)`` layout written without its backend."""
    return (
        f"Backend must be explicitly specified in {layout!r}: hybrid attn/ffn layouts run on "
        f"{' or '.join(HYBRID_BACKENDS)}; write e.g. {'megatron:' + layout!r}"
    )


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name an allocation, or None when it can."""
    if isinstance(name, str) and IDENTIFIER.match(name):
        return None
    return (
        f"name {name!r} is not an identifier: use letters, digits and '_', "
        f"not starting with a digit"
    )


def scheduling_problem(kind: object, target: object) -> str | None:
    """Why a scheduling strategy of ``kind`` onto ``target`` is not allowed, or None."""
    if kind not in SCHEDULING_TYPES:
        return f"scheduling type {kind!r} is not allowed; use 'separation' or 'colocation'"
    if target is not None and not isinstance(target, str):
        return f"scheduling target must be an engine name, got {target!r}"
    if kind == "colocation" and not target:
        return "colocation needs a target: the engine whose GPUs are shared"
    if kind == "separation" and target:
        return (
            f"separation takes no target, got target={target!r}; "
            f"use type='colocation' to share {target!r}'s GPUs"
        )
    return None


def colocation_size_problem(mine: int, target: str, theirs: int) -> str | None:
    """Why an engine of world size ``mine`` cannot share ``target``'s ``theirs`` GPUs."""
    if mine == theirs:
        return None
    return (
        f"colocated with {target} it must span the same GPUs, but its world size is {mine} "
        f"and {target}'s is {theirs}"
    )


def role_problem(where: str, role: str, backend: str) -> str | None:
    """Why ``backend`` cannot run an engine of ``role``, or None."""
    if role == "training" and backend in INFERENCE_BACKENDS:
        return (
            f"{where} is a training engine; use {', '.join(TRAINING_BACKENDS[:-1])} or "
            f"{TRAINING_BACKENDS[-1]} ({' and '.join(INFERENCE_BACKENDS)} serve the rollout)"
        )
    if role == "inference" and backend in TRAINING_BACKENDS:
        return (
            f"{where} is an inference engine; use {' or '.join(INFERENCE_BACKENDS)} "
            f"({', '.join(TRAINING_BACKENDS[:-1])} and {TRAINING_BACKENDS[-1]} train)"
        )
    return None


#: areal-alloc's own settings, by the name the Hydra hook takes (``--`` + the name with
#: dashes is the flag, ``AREAL_ALLOC_`` + the name in capitals the environment variable):
#: never keys of the experiment, which the reference's loader refuses (``areal_alloc.settings``
#: resolves them; ``experiment.reference_keys`` names them when one is written under
#: ``cluster``).
SETTING_NAMES = (
    "gpu",
    "peak_tflops",
    "hbm_tbps",
    "nvlink_gbps",
    "inter_node_gbps",
    "disk_gbps",
    "compute_efficiency",
    "comm_efficiency",
    "memory_reserve_gib",
    "on_memory",
    "mean_gen_len",
    "host_memory_gib",
    "host_cpus",
    "reference_version",
)
