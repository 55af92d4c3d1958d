"""``areal_alloc.validate`` resolves the settings as the hook does (issue 16 item 3): the
environment (``AREAL_ALLOC_GPU``), then nvidia-smi, then the config's ``cluster`` keys, so a
config the reference's loader read (no ``cluster.gpu``) is still checked for memory."""

from __future__ import annotations

import pytest

from areal_alloc import AllocationValidationError, validate
from areal_alloc.settings import Settings

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


#: 7B, full fine-tuning on one GPU: about 207 GiB per GPU, far over a 24 GiB RTX-4090
CONFIG = {
    "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
    "actor": {"backend": "fsdp:d1", "path": "Qwen/Qwen2.5-7B"},
}


@pytest.fixture(autouse=True)
def _no_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AREAL_ALLOC_DETECT", "0")  # this machine's nvidia-smi is not the point
    monkeypatch.delenv("AREAL_ALLOC_GPU", raising=False)


def test_validate_reads_the_gpu_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert validate(CONFIG).gpu is None  # no GPU anywhere: nothing to check memory against
    monkeypatch.setenv("AREAL_ALLOC_GPU", "RTX-4090")
    with pytest.raises(AllocationValidationError) as info:
        validate(CONFIG)
    assert info.value.message.startswith(
        "actor.backend='fsdp:d1': needs about 212.4 GiB per GPU, over the 23.6 GiB of a RTX-4090"
    )
    assert info.value.message.endswith("(GPU: RTX-4090, from AREAL_ALLOC_GPU)")
    # on_memory from the environment too, as the hook reads it
    monkeypatch.setenv("AREAL_ALLOC_ON_MEMORY", "warn")
    plan = validate(CONFIG)
    assert (plan.gpu, plan.gpu_origin) == ("RTX-4090", "from AREAL_ALLOC_GPU")


def test_explicit_settings_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AREAL_ALLOC_GPU", "RTX-4090")
    # Settings(): the config's own cluster keys only (it names no GPU here)
    assert validate(CONFIG, settings=Settings()).gpu is None
    flags = Settings.from_sources(flags={"gpu": "B200", "on_memory": "warn"})
    plan = validate(CONFIG, settings=flags)
    assert (plan.gpu, plan.gpu_source) == ("B200", "--gpu")
