"""The flags the subcommands share (one group each: the GPU, memory, speed, hardware, host,
ranking) and what they give: the machine's settings, the training and inference
settings, a layout's memory."""

from __future__ import annotations

import argparse
import os

from areal_alloc.catalogue import add_files
from areal_alloc.cli.args import (
    count,
    fraction,
    positive,
    real,
    reference_flag,
    speed,
)
from areal_alloc.defaults import (
    CONTEXT_LENGTH,
    MEMORY_FRACTION,
    MICRO_BATCH_TOKENS,
    PROMPT_TOKENS,
    TOKENS_PER_STEP,
)
from areal_alloc.defaults import RECOMPUTE as RECOMPUTE_DEFAULT
from areal_alloc.estimate.execution import (
    RECOMPUTE,
)
from areal_alloc.settings import (
    MAX_HOST_MEMORY_GIB,
    MAX_RESERVE_GIB,
)

#: The help of the flags every estimate command shares (one text, one default each:
#: areal_alloc.defaults); suggest --config's own keys come first, as its help says.
TOKENS_HELP = f"tokens per micro-batch (mb_spec.max_tokens_per_mb; default {MICRO_BATCH_TOKENS:,})"


RECOMPUTE_HELP = (
    f"activation recomputation (gradient_checkpointing): none, selective, full or op "
    f"(default {RECOMPUTE_DEFAULT})"
)


TOKENS_PER_STEP_HELP = f"training tokens per optimizer step (default {TOKENS_PER_STEP:,})"


#: explain's --seq-len is training's only (an inference speed takes --prompt-len, --gen-len)
SEQ_LEN_TRAINING_HELP = (
    f"sequence length for attention (training; default the micro-batch tokens, at most "
    f"{CONTEXT_LENGTH:,})"
)


SEQ_LEN_HELP = f"{SEQ_LEN_TRAINING_HELP} and context (inference; default --context-length)"


PROMPT_LEN_HELP = (
    f"prompt tokens per sequence (train_dataset.max_length; default {PROMPT_TOKENS:,}, assumed)"
)


GEN_LEN_HELP = "the longest generation per sequence, gconfig.max_new_tokens"


#: explain's and calibrate's --batch: one inference instance's (suggest's step is --batch-size)
BATCH_HELP = "inference: sequences decoded together per instance"


CONTEXT_LENGTH_HELP = (
    f"inference: sglang.context_length / vllm.max_model_len (default {CONTEXT_LENGTH:,})"
)


class _CatalogueFile(argparse.Action):
    """``--catalogue FILE``: a user's GPUs and models, added to the catalogue as the flag
    is read (``catalogue.add_files``: a bad field is one error line)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        add_files([str(values)])


def gpu_flags(parser: argparse.ArgumentParser) -> None:
    """--gpu, --memory-reserve-gib (``areal_alloc.settings``; also from the
    environment: AREAL_ALLOC_GPU, AREAL_ALLOC_MEMORY_RESERVE_GIB) and --catalogue."""
    parser.add_argument(
        "--catalogue",
        action=_CatalogueFile,
        metavar="FILE",
        help="a JSON file of your own GPUs and models, in the shape of the package's "
        "(docs/architecture.md); also AREAL_ALLOC_CATALOGUE (paths joined by "
        f"{os.pathsep!r}) and the hook's catalogue",
    )
    parser.add_argument(
        "--gpu",
        metavar="G",
        help="a GPU name such as H100-80GB, or its memory in GiB (80); default "
        "AREAL_ALLOC_GPU, else the GPU nvidia-smi reports",
    )
    parser.add_argument(
        "--memory-reserve-gib",
        type=real(0, MAX_RESERVE_GIB, above=False),
        default=None,
        metavar="GIB",
        help="memory kept back per GPU for the CUDA context, NCCL and fragmentation "
        "(default 4 training, 2 inference)",
    )


def memory_flags(parser: argparse.ArgumentParser) -> None:
    """--model, --gpu and the settings that change memory (the reference's defaults)."""
    parser.add_argument(
        "--model",
        metavar="M",
        help="a local config.json (or folder), a hub id in the local Hugging Face cache, or a "
        "catalogue name such as Qwen3-8B: estimate memory per GPU",
    )
    gpu_flags(parser)
    parser.add_argument(
        "--tokens",
        type=count,
        default=None,
        metavar="N",
        help=TOKENS_HELP,
    )
    parser.add_argument(
        "--recompute", choices=RECOMPUTE, default=RECOMPUTE_DEFAULT, help=RECOMPUTE_HELP
    )
    parser.add_argument(
        "--optimizer",
        choices=("adam", "adam_bf16", "sgd", "none"),
        default="adam",
        help="optimizer.type; none: forward only (a ref or a teacher)",
    )
    parser.add_argument(
        "--lora-rank",
        type=count,
        default=None,
        metavar="R",
        help="use_lora with lora_rank R (all-linear): only the adapters train",
    )
    parser.add_argument(
        "--memory-efficient-load",
        action="store_true",
        help="FSDP fsdp.memory_efficient_load: true (default false: every rank first builds "
        "the whole model in optimizer_dtype on its GPU)",
    )
    parser.add_argument(
        "--context-length",
        type=count,
        default=CONTEXT_LENGTH,
        metavar="N",
        help=CONTEXT_LENGTH_HELP,
    )
    parser.add_argument(
        "--mem-fraction",
        type=fraction,
        default=MEMORY_FRACTION,
        metavar="F",
        help=f"inference: sglang.mem_fraction_static / vllm.gpu_memory_utilization "
        f"({MEMORY_FRACTION})",
    )


def rank_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rank",
        action="store_true",
        help="order the layouts that fit by estimated throughput (needs --model and --gpu)",
    )
    parser.add_argument("--top", type=positive, metavar="K", help="only the K fastest")
    parser.add_argument(
        "--json", action="store_true", help="one object per layout (with --rank: its speed)"
    )


def speed_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tokens-per-step",
        type=count,
        default=TOKENS_PER_STEP,
        metavar="N",
        help=TOKENS_PER_STEP_HELP,
    )
    parser.add_argument("--seq-len", type=count, default=None, metavar="N", help=SEQ_LEN_HELP)
    hardware_flags(parser)


def hardware_flags(parser: argparse.ArgumentParser) -> None:
    """The GPU's speeds, the network and the efficiencies (``areal_alloc.settings``;
    also from the environment: AREAL_ALLOC_PEAK_TFLOPS …)."""
    for flag, text in (
        ("--peak-tflops", "dense BF16 TFLOP/s of a GPU not in the catalogue"),
        ("--hbm-tbps", "HBM bandwidth (TB/s) of a GPU not in the catalogue"),
        ("--nvlink-gbps", "NVLink GB/s per GPU, both directions (as published)"),
        ("--inter-node-gbps", "network Gb/s per GPU between nodes (default 200, assumed)"),
        (
            "--disk-gbps",
            "GB/s of the file system a disk weight update crosses (default 2, assumed)",
        ),
        ("--compute-efficiency", "fraction of peak compute reached (default 0.5, assumed)"),
        ("--comm-efficiency", "fraction of link bandwidth reached (default 0.7, assumed)"),
    ):
        kind = fraction if flag.endswith("efficiency") else speed
        parser.add_argument(flag, type=kind, default=None, metavar="X", help=text)


def mean_gen_len_flag(parser: argparse.ArgumentParser) -> None:
    """--mean-gen-len, where a generation length is estimated: the plan (check), suggest
    and explain's generation; --gen-len (gconfig.max_new_tokens) stays the longest."""
    parser.add_argument(
        "--mean-gen-len",
        type=count,  # a length: the bound AREAL_ALLOC_MEAN_GEN_LEN and the hook use too
        default=None,
        metavar="N",
        help="mean generated tokens per sequence for the rollout's throughput (default the "
        "longest: gconfig.max_new_tokens, --gen-len; also AREAL_ALLOC_MEAN_GEN_LEN)",
    )


def host_flags(parser: argparse.ArgumentParser) -> None:
    """--host-memory-gib and --host-cpus: one node's host memory and CPUs, which the
    scheduler's requests and what the run keeps in host memory are checked against
    (``areal_alloc.estimate.host``; also AREAL_ALLOC_HOST_MEMORY_GIB / _HOST_CPUS, else
    this machine's, taken as a node's and only warned against)."""
    parser.add_argument(
        "--host-memory-gib",
        type=real(0, MAX_HOST_MEMORY_GIB, above=True),
        default=None,
        metavar="GIB",
        help="one node's host (CPU) memory in GiB: over it the plan is refused (default "
        "AREAL_ALLOC_HOST_MEMORY_GIB, else this machine's, which only warns)",
    )
    parser.add_argument(
        "--host-cpus",
        type=count,
        default=None,
        metavar="N",
        help="one node's CPUs, against the scheduler's scheduling_spec.cpu requests "
        "(default AREAL_ALLOC_HOST_CPUS, else this machine's, which only warns)",
    )


def calibration_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-calibration",
        action="store_true",
        help="leave out a stored calibration (areal-alloc calibrate --list shows them)",
    )


def setting_flags(parser: argparse.ArgumentParser) -> None:
    """areal-alloc's own settings, which the experiment cannot hold (the reference's
    loader refuses unknown keys): --on-memory, --gpu and the GPU's speeds."""
    parser.add_argument(
        "--on-memory",
        choices=("fail", "warn", "off"),
        default=None,
        help="an engine predicted over its GPU memory: fail (default), warn, or off (no "
        "estimate); default AREAL_ALLOC_ON_MEMORY",
    )
    reference_flag(parser)
    gpu_flags(parser)
    hardware_flags(parser)
    mean_gen_len_flag(parser)
    calibration_flag(parser)
    host_flags(parser)
