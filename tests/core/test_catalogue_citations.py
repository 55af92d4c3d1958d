"""Every speed figure of the GPU catalogue cites where it was read (issue 17, "Done when")."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from areal_alloc.catalogue import _ALIASES, GPU, GPUS, MODELS, POSITIONS

FIGURES = ("bf16_tflops", "hbm_tbps", "nvlink_gbps")
#: ``owner/name path@<40 hex> ("quoted line"...``: a file read at a commit; or a page's URL
AT_COMMIT = re.compile(r'^[\w.-]+/[\w.-]+ \S+@[0-9a-f]{40} \("')
URL = re.compile(r"^https?://\S+")
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e\d+)?")


def _names(gpu: GPU, cited: bool) -> list[str]:
    return [f for f in FIGURES if (getattr(gpu, f) is not None) is cited]


def _quoted_numbers(citation: str) -> list[float]:
    return [float(n) for n in NUMBER.findall(citation.split("@", 1)[-1][40:])]


def _states(value: float, citation: str) -> bool:
    """The citation's own text gives ``value`` in some decimal unit (TB/s as GB/s or B/s),
    or half of it where the source gives one direction of a link."""
    wanted = [value] + ([value / 2] if "direction" in citation else [])
    return any(
        math.isclose(number, w * 10.0**k, rel_tol=1e-9)
        for number in _quoted_numbers(citation)
        for w in wanted
        for k in range(-3, 16)
    )


@pytest.mark.parametrize("gpu", list(GPUS.values()), ids=lambda g: g.name)
def test_every_speed_figure_cites_a_commit_or_a_url(gpu: GPU) -> None:
    cited = dict(gpu.cited)
    assert set(cited) == set(_names(gpu, True)), "a figure without a citation, or the reverse"
    for figure in _names(gpu, True):
        first = cited[figure].split("; ")[0]
        assert AT_COMMIT.match(first) or URL.match(first), f"{gpu.name} {figure}: {first}"


@pytest.mark.parametrize(
    ("gpu", "figure"),
    [(g, f) for g in GPUS.values() for f in _names(g, True)],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_the_cited_line_states_the_figure(gpu: GPU, figure: str) -> None:
    citation = gpu.citation(figure)
    assert citation is not None
    assert _states(float(getattr(gpu, figure)), citation), f"{gpu.name} {figure}: {citation}"


def test_a_gpu_without_cited_speeds_has_none() -> None:
    gpu = GPUS["rtx-4090"]
    assert (gpu.bf16_tflops, gpu.hbm_tbps, gpu.nvlink_gbps, gpu.speed_source) == (
        None,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("value", "citation", "expected"),
    [
        (2.039, "a/b p.yaml@" + "0" * 40 + ' ("mem_bw: 2039000000000 # 2.039TB/s")', True),
        (2.0, "a/b p.yaml@" + "0" * 40 + ' ("mem_bw: 2039000000000 # 2.039TB/s")', False),
        (900, "a/b p.yaml@" + "0" * 40 + ' ("intra_node_bw: 450000000000"; per direction)', True),
        (900, "a/b p.yaml@" + "0" * 40 + ' ("intra_node_bw: 450000000000")', False),
    ],
)
def test_the_figure_check_can_fail(value: float, citation: str, expected: bool) -> None:
    assert _states(value, citation) is expected


# --- the models' positions (catalogue.POSITIONS): each from a config.json read at a commit ---


@pytest.mark.parametrize(("hub_id", "cited"), list(POSITIONS.items()), ids=list(POSITIONS))
def test_every_position_cites_the_line_it_was_read_from(
    hub_id: str, cited: tuple[dict[str, Any], str]
) -> None:
    values, citation = cited
    assert AT_COMMIT.match(citation), citation
    quoted = citation.split("@", 1)[1][40:]
    assert f'"max_position_embeddings": {values["max_position_embeddings"]}' in quoted
    rope = values.get("rope_scaling")
    if rope is None:
        assert '"rope_scaling": {' not in quoted
    else:  # every key of rope_scaling, as the quoted line gives it
        for key, value in rope.items():
            assert f'"{key}": {json.dumps(value)}' in quoted, (key, citation)


def test_every_cited_id_is_a_catalogue_model_or_alias() -> None:
    known = {*MODELS, *_ALIASES}
    assert [h for h in POSITIONS if h.lower() not in known] == []
