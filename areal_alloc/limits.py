"""Upper bounds on every size areal-alloc accepts, far beyond any real cluster.

They keep every answer fast and every output readable: a layout or a cluster
past them is rejected with an :class:`AllocationValidationError` that states the
bound, instead of a hang, a ``MemoryError`` or an ``OverflowError``.
"""

from __future__ import annotations

from areal_alloc.errors import shown

__all__ = [
    "MAX_COUNT",
    "MAX_GPUS",
    "MAX_GPUS_PER_NODE",
    "MAX_LAYOUTS",
    "MAX_LENGTH",
    "MAX_NODES",
    "MAX_RANKED",
    "MAX_SEARCHED",
    "counted",
    "grouped",
    "readable",
]

#: Characters of one backend or allocation_mode string; longer ones are refused unparsed.
MAX_LENGTH = 1000

#: GPUs of one layout (d × t × p × c) and of one cluster (n_nodes × n_gpus_per_node): 2**20.
MAX_GPUS = 1_048_576
#: Nodes of one cluster: 2**17.
MAX_NODES = 131_072
#: GPUs of one node.
MAX_GPUS_PER_NODE = 1024
#: Tokens, sequences and lengths (tokens per step, per micro-batch, context lengths,
#: batch sizes): 2**40, a thousand times any real training step.
MAX_COUNT = 1 << 40
#: Layouts one search lists before it asks for tighter constraints.
MAX_LAYOUTS = 50_000
#: Layouts ``layouts --rank`` estimates one by one (memory and speed of each, about
#: 60 µs apiece) before it asks for ``--top K`` or tighter constraints.
MAX_RANKED = 5_000
#: Layouts ``layouts --rank --top K`` searches at most (a bounded search: most are
#: passed over unestimated, but each is still listed and checked against the model).
MAX_SEARCHED = 10_000


def grouped(number: int) -> str:
    """``1048576`` → ``'1,048,576'`` (the form every bound is quoted in)."""
    return f"{number:,}"


def counted(number: int, noun: str) -> str:
    """``counted(1, "GPU")`` → ``'1 GPU'``, ``counted(16, "GPU")`` → ``'16 GPUs'``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def readable(number: int) -> str:
    """A size for a message: grouped digits, or its digit count when absurdly long
    (:func:`areal_alloc.errors.shown`, which also counts past Python's 4,300-digit limit)."""
    return grouped(number) if abs(number) < 10**24 else shown(number)
