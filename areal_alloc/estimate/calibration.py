"""Efficiencies fitted from one measured step, kept for later estimates of that model and GPU.

``areal-alloc calibrate`` takes one real measurement — a training step's seconds,
or an inference engine's generated tokens per second — for a layout, and solves
for the one efficiency that makes the estimate match it: the fraction of peak
compute (training; the communication terms are kept as estimated) or the
fraction of HBM bandwidth (decode; the fits are ``speed.fit_training`` and
``speed.fit_decode``, beside the terms they invert). A fit outside
[:data:`MIN_EFFICIENCY`, 1] (or not finite) is refused and nothing is stored. The result
is stored per model and GPU in the user's private cache folder
(``~/.cache/areal-alloc/calibration.json``,
read only when the folder and the file are the user's own, ``_cache``), and
``layouts --rank``, ``suggest`` and the plan of ``check`` and the app start from
it and name it (:func:`describe`) unless told otherwise: ``--no-calibration``
on the command line, ``AREAL_ALLOC_NO_CALIBRATION=1`` anywhere, or
``areal-alloc calibrate --forget`` to remove it. A damaged or out-of-range stored
value is ignored.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from areal_alloc._cache import (
    cache_folder,
    folder_path,
    read_private,
    remove_private,
    write_private,
)
from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.files import CALIBRATION, parse_json
from areal_alloc.numbers import read_float

__all__ = [
    "MAX_STEP_SECONDS",
    "MAX_TOKENS_PER_SECOND",
    "MIN_EFFICIENCY",
    "OFF",
    "OFF_ANYWHERE",
    "Calibration",
    "check_efficiency",
    "check_measured",
    "describe",
    "disabled",
    "entries",
    "folder",
    "forget",
    "load",
    "save",
    "usable",
]

FILE = "calibration.json"

#: The smallest efficiency a calibration may store: a thousandth of peak. Real
#: kernels reach 0.2–0.7 of peak compute and 0.5–0.9 of HBM bandwidth; a fit below
#: this means the measurement, the layout or the tokens per step were mistyped.
MIN_EFFICIENCY = 0.001

#: How to turn a stored calibration off, as every output that uses one says.
OFF = (
    "--no-calibration or AREAL_ALLOC_NO_CALIBRATION=1 leaves it out; "
    "areal-alloc calibrate --forget removes it"
)

#: The same where no flag exists (``check``, the app, the Hydra hook, ``validate()``).
OFF_ANYWHERE = (
    "AREAL_ALLOC_NO_CALIBRATION=1 leaves it out; areal-alloc calibrate --forget removes it"
)

_KINDS = ("compute", "hbm")


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


def folder() -> Path:
    """Where the store is kept (whether or not that folder is usable)."""
    return folder_path()


def usable() -> bool:
    """Whether the store's folder is private to the user (else nothing is read or kept)."""
    return cache_folder() is not None


def disabled() -> bool:
    """``AREAL_ALLOC_NO_CALIBRATION`` is set (to anything but empty or 0)."""
    return os.environ.get("AREAL_ALLOC_NO_CALIBRATION", "") not in ("", "0")


def _usable(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and MIN_EFFICIENCY <= value <= 1
    )


def _read() -> dict[str, dict[str, object]]:
    data = read_private(FILE, CALIBRATION.limit)
    if data is None:
        return {}
    try:
        found = parse_json(data.decode("utf-8"), CALIBRATION, FILE)
    except (AllocationError, UnicodeDecodeError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): v for k, v in found.items() if isinstance(v, dict)}


def _from_entry(entry: dict[str, object]) -> Calibration | None:
    values: dict[str, float | str] = {}
    for kind in _KINDS:
        value = entry.get(f"{kind}_efficiency")
        source = entry.get(f"{kind}_source")
        if _usable(value):
            values[f"{kind}_efficiency"] = float(value)  # type: ignore[arg-type]
            values[f"{kind}_source"] = (
                source[:500] if isinstance(source, str) and source else "a measurement"
            )
    if not values:
        return None
    return Calibration(**values)  # type: ignore[arg-type]


def load(arch: Architecture, gpu: str) -> Calibration | None:
    """The stored calibration of this model on this GPU, if any and not turned off.

    A damaged file, a value that is not a finite number in [MIN_EFFICIENCY, 1], or a
    file that is not the user's own: none.
    """
    if disabled():
        return None
    return _from_entry(_read().get(_key(arch, gpu)) or {})


def entries() -> list[tuple[str, str, Calibration]]:
    """Every usable stored calibration: (its key, the model as given to calibrate, it)."""
    found = []
    for key, entry in sorted(_read().items()):
        calibration = _from_entry(entry)
        if calibration is not None:
            model = entry.get("model")
            found.append((key, model if isinstance(model, str) else "", calibration))
    return found


def describe(calibration: Calibration, use_compute: bool = True) -> str:
    """What a calibration in use sets, and where it came from (without how to turn it off)."""
    parts = []
    if use_compute and calibration.compute_efficiency is not None:
        parts.append(
            f"compute efficiency {calibration.compute_efficiency:.3g} from "
            f"{calibration.compute_source}"
        )
    if calibration.hbm_efficiency is not None:
        parts.append(
            f"HBM efficiency {calibration.hbm_efficiency:.3g} from {calibration.hbm_source}"
        )
    return "; ".join(parts)


def check_efficiency(efficiency: float, what: str, of: str, check: str) -> float:
    """A fitted efficiency in [MIN_EFFICIENCY, 1], or one error line (nothing is stored)."""
    if not math.isfinite(efficiency):
        problem = f"gives no finite fraction of {of}"
    elif efficiency > 1:
        problem = f"would need {efficiency:.3g} of {of}"
    elif efficiency < MIN_EFFICIENCY:
        problem = (
            f"would mean {efficiency:.3g} of {of}, under the floor of {MIN_EFFICIENCY:g} "
            f"a calibration keeps"
        )
    else:
        return efficiency
    raise AllocationValidationError(f"{what} {problem}: {check}; nothing was stored")


def save(arch: Architecture, gpu: str, calibration: Calibration, model: str = "") -> Path | None:
    """Store (merging with what is there); None when the cache folder is not private or
    not writable. Each efficiency must be in [MIN_EFFICIENCY, 1]."""
    for kind in _KINDS:
        value = getattr(calibration, f"{kind}_efficiency")
        if value is not None and not _usable(value):
            raise AllocationValidationError(
                f"{kind} efficiency {value!r} cannot be stored: it must be a number from "
                f"{MIN_EFFICIENCY:g} to 1"
            )
    data = _read()
    key = _key(arch, gpu)
    entry = dict(data.get(key) or {})
    for kind in _KINDS:
        value = getattr(calibration, f"{kind}_efficiency")
        if value is not None:
            entry[f"{kind}_efficiency"] = value
            entry[f"{kind}_source"] = getattr(calibration, f"{kind}_source")
    if model:
        entry["model"] = model
    data[key] = entry
    return write_private(FILE, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))


def forget(arch: Architecture | None = None, gpu: str | None = None) -> int:
    """Remove every stored calibration, or only that of ``arch`` on ``gpu``; how many went."""
    data = _read()
    if arch is None or gpu is None:
        gone = len(data)
        removed = remove_private(FILE)
        return gone if removed else 0
    if data.pop(_key(arch, gpu), None) is None:
        return 0
    written = write_private(FILE, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))
    return 1 if written is not None else 0


#: Bounds of a measurement: a training step under 10^7 s (four months), a generation
#: rate under 10^12 tokens/s.
MAX_STEP_SECONDS = 1e7
MAX_TOKENS_PER_SECOND = 1e12


def check_measured(value: float, flag: str, limit: float) -> float:
    """A measured figure (above 0, finite, at most ``limit``), or one error that quotes it.

    The command line's flags read it with the same bound (``cli.args.real``); this is the
    check for a caller of the library.
    """
    return read_float(value, flag, minimum=0, maximum=limit, above=True)
