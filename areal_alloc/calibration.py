"""Efficiencies fitted from one measured step, kept for later estimates of that model and GPU.

``areal-alloc calibrate`` takes one real measurement — a training step's seconds,
or an inference engine's generated tokens per second — for a layout, and solves
for the one efficiency that makes the estimate match it: the fraction of peak
compute (training; the communication terms are kept as estimated) or the
fraction of HBM bandwidth (decode). The result is stored per model and GPU in
the user's private cache folder (``~/.cache/areal-alloc/calibration.json``), and
``layouts --rank`` and ``suggest`` start from it (and say so) unless told otherwise.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from areal_alloc._cache import cache_folder
from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError
from areal_alloc.throughput import Hardware, StepEstimate

__all__ = ["Calibration", "check_measured", "fit_decode", "fit_training", "load", "save"]

FILE = "calibration.json"


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted efficiencies and the measurement each came from."""

    compute_efficiency: float | None = None
    hbm_efficiency: float | None = None
    compute_source: str = ""
    hbm_source: str = ""


def _key(arch: Architecture, gpu: str) -> str:
    p = arch.parameters
    return f"{gpu.lower()}|h{arch.hidden_size}|L{arch.num_layers}|{p.total}"


def _path() -> Path | None:
    folder = cache_folder()
    return None if folder is None else folder / FILE


def _read() -> dict[str, dict[str, object]]:
    path = _path()
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load(arch: Architecture, gpu: str) -> Calibration | None:
    """The stored calibration of this model on this GPU, if any (a damaged file: none)."""
    entry = _read().get(_key(arch, gpu))
    if not isinstance(entry, dict):
        return None
    values: dict[str, float | str] = {}
    for kind in ("compute", "hbm"):
        value = entry.get(f"{kind}_efficiency")
        source = entry.get(f"{kind}_source")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1:
            values[f"{kind}_efficiency"] = float(value)
            values[f"{kind}_source"] = source if isinstance(source, str) else "a measurement"
    if not values:
        return None
    return Calibration(**values)  # type: ignore[arg-type]


def save(arch: Architecture, gpu: str, calibration: Calibration) -> Path | None:
    """Store (merging with what is there); None when the cache folder is not writable."""
    path = _path()
    if path is None:
        return None
    data = _read()
    entry = dict(data.get(_key(arch, gpu)) or {})
    for kind in ("compute", "hbm"):
        value = getattr(calibration, f"{kind}_efficiency")
        if value is not None:
            entry[f"{kind}_efficiency"] = value
            entry[f"{kind}_source"] = getattr(calibration, f"{kind}_source")
    data[_key(arch, gpu)] = entry
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        temporary.replace(path)
    except OSError:
        return None
    return path


#: Bounds of a measurement: a training step under 10^7 s (four months), a generation
#: rate under 10^12 tokens/s.
MAX_STEP_SECONDS = 1e7
MAX_TOKENS_PER_SECOND = 1e12


def check_measured(value: float, flag: str, limit: float) -> float:
    """A measured figure as given on the command line, or one error that quotes it."""
    if not 0 < value < limit:  # also refuses nan and inf
        raise AllocationValidationError(
            f"{flag} {value:g}: must be a number above 0 and below {limit:g}"
        )
    return value


def fit_training(measured_seconds: float, estimate: StepEstimate, hardware: Hardware) -> float:
    """The compute efficiency that makes ``estimate`` take ``measured_seconds``."""
    check_measured(measured_seconds, "--step-seconds", MAX_STEP_SECONDS)
    compute = sum(t.seconds for t in estimate.terms if t.name in ("compute", "pipeline bubble"))
    rest = estimate.seconds - compute
    if measured_seconds <= rest:
        raise AllocationValidationError(
            f"the measured {measured_seconds:g} s is less than the estimated communication "
            f"alone ({rest:.3g} s): give the cluster's real network (--inter-node-gbps) or a "
            f"higher --comm-efficiency"
        )
    efficiency = hardware.compute_efficiency * compute / (measured_seconds - rest)
    if efficiency > 1:
        raise AllocationValidationError(
            f"the measured {measured_seconds:g} s would need {efficiency:.2f} of peak compute: "
            f"check the layout, tokens per step and GPU"
        )
    return efficiency


def fit_decode(
    measured_tokens_per_second: float, estimate: StepEstimate, hardware: Hardware
) -> float:
    """The HBM efficiency that makes ``estimate`` generate ``measured`` tokens per second."""
    check_measured(measured_tokens_per_second, "tokens per second", MAX_TOKENS_PER_SECOND)
    measured_seconds = estimate.tokens / measured_tokens_per_second
    hbm = sum(t.seconds for t in estimate.terms if t.name == "HBM reads")
    rest = estimate.seconds - hbm
    if measured_seconds <= rest:
        raise AllocationValidationError(
            f"{measured_tokens_per_second:g} tokens/s is faster than the estimated "
            f"tensor-parallel traffic alone allows ({estimate.tokens / rest:,.0f} tokens/s)"
        )
    efficiency = hardware.hbm_efficiency * hbm / (measured_seconds - rest)
    if efficiency > 1:
        raise AllocationValidationError(
            f"{measured_tokens_per_second:g} tokens/s would need {efficiency:.2f} of the HBM "
            f"bandwidth: check the layout, batch and GPU"
        )
    return efficiency
