"""The HTML report (issue 19), in process: its structure against the plan's JSON and the
text node map, the rank groups against ``explain --json``, escaping, no network, size."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from areal_alloc.limits import MAX_GPUS_PER_NODE
from areal_alloc.model import ModelAllocation
from areal_alloc.report import render_report
from areal_alloc.report._grid import MAX_COLUMNS, MAX_ROWS
from areal_alloc.report._groups import MAX_DRAWN_RANKS, engine_groups
from areal_alloc.report._page import MAX_EMBEDDED_RUNS
from tests.conftest import MainCli, Ran

EXPERIMENTS = sorted(
    p.stem for p in (Path(__file__).parents[2] / "conf" / "app" / "experiment").glob("*.yaml")
)
#: A 1,024-GPU hybrid MoE layout: 64 SGLang servers of a node each, a folded Megatron actor.
MOE_1024 = (
    "experiment=moe_32",
    "cluster.n_nodes=128",
    "rollout.backend=sglang:d64t8",
    "actor.backend='megatron:(attn:d8p4t4c4|ffn:d4p4t2e16)'",
)
#: Two megabytes: the bound the page stays under for any plan within the limits.
MAX_BYTES = 2 * 1024 * 1024


class Element:
    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs, self.text = tag, attrs, ""


class Page(HTMLParser):
    """Every element with its attributes, and the text of script elements and titles."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        if tag not in ("meta", "input", "line", "circle"):
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop().tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1].text += data

    def select(self, tag: str, cls: str | None = None) -> list[Element]:
        return [
            e
            for e in self.elements
            if e.tag == tag and (cls is None or cls in e.attrs.get("class", "").split())
        ]

    def by_id(self, ident: str) -> Element:
        (found,) = [e for e in self.elements if e.attrs.get("id") == ident]
        return found


#: Each command's answer, once per session: the pages and plans are read by many tests.
_RUNS: dict[tuple[str, ...], Ran] = {}


def run(main_cli: MainCli, *args: str) -> Ran:
    """``main_cli(*args)``, run once and kept (the same command answers the same)."""
    if args not in _RUNS:
        _RUNS[args] = main_cli(*args)
    return _RUNS[args]


def said(stderr: str) -> list[str]:
    """What the run said on stderr beyond the hook's warnings and assumptions."""
    noted = ("areal-alloc: warning: ", "areal-alloc: assumed: ")
    return [line for line in stderr.splitlines() if not line.startswith(noted)]


def plan_of(main_cli: MainCli, *overrides: str) -> dict[str, Any]:
    ran = run(main_cli, *overrides, "output=json")
    assert (ran.returncode, said(ran.stderr)) == (0, []), ran.stderr
    plan: dict[str, Any] = json.loads(ran.stdout)
    return plan


def html_of(main_cli: MainCli, *overrides: str) -> str:
    ran = run(main_cli, *overrides, "output=html")
    assert (ran.returncode, said(ran.stderr)) == (0, []), ran.stderr
    return ran.stdout


def _text_map_rows(main_cli: MainCli, *overrides: str) -> list[str]:
    """The row labels of the text node map (``node 0``, ``nodes 2–5``)."""
    text = run(main_cli, *overrides).stdout
    return re.findall(r"^  (nodes? \d+(?:–\d+)?) ", text, flags=re.MULTILINE)


CASES = [(f"experiment={name}",) for name in EXPERIMENTS] + [MOE_1024]


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o))
def test_one_cell_per_gpu_of_each_row_the_rows_of_the_text_map(
    overrides: tuple[str, ...], main_cli: MainCli
) -> None:
    plan = plan_of(main_cli, *overrides)
    page = Page(html_of(main_cli, *overrides))
    cells = page.select("rect", "gpu")
    rows = list(dict.fromkeys(c.attrs["data-row"] for c in cells))
    assert rows == _text_map_rows(main_cli, *overrides)
    per_node = plan["cluster"]["n_gpus_per_node"]
    assert len(cells) == len(rows) * per_node
    for row in rows:
        gpus = [int(c.attrs["data-gpu"]) for c in cells if c.attrs["data-row"] == row]
        assert gpus == list(range(per_node))
    # every placed GPU is drawn in its engine's cells: owners per row as the JSON places them
    first = {row: int(row.split()[1].split("–")[0]) for row in rows}
    for cell in cells:
        gpu = first[cell.attrs["data-row"]] * per_node + int(cell.attrs["data-gpu"])
        owner = [
            p["key"]
            for p in plan["placements"]
            if any(r["start"] <= gpu < r["stop"] for r in p["gpu_ranges"])
        ]
        assert [cell.attrs["data-engine"]] == (owner or [""])


@pytest.mark.parametrize(
    "overrides",
    [
        # two servers a node on two alike nodes: one row, as the text map merges them
        ("cluster.n_nodes=3", "rollout.backend=sglang:d4t4", "actor.backend=fsdp:d4t2"),
        ("cluster.n_nodes=5", "rollout.backend=sglang:d2t16", "actor.backend=fsdp:d4t2"),
        ("cluster.n_nodes=64", "rollout.backend=sglang:d12t3", "actor.backend=fsdp:d64"),
    ],
    ids=["servers-of-4", "servers-of-16", "servers-of-3"],
)
def test_the_rows_are_the_text_maps_rows(overrides: tuple[str, ...], main_cli: MainCli) -> None:
    page = Page(html_of(main_cli, "experiment=moe_32", *overrides))
    rows = list(dict.fromkeys(c.attrs["data-row"] for c in page.select("rect", "gpu")))
    assert rows == _text_map_rows(main_cli, "experiment=moe_32", *overrides)


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o))
def test_the_legend_names_each_placed_engine_the_colocated_ones_and_the_free_gpus(
    overrides: tuple[str, ...], main_cli: MainCli
) -> None:
    plan = plan_of(main_cli, *overrides)
    page = Page(html_of(main_cli, *overrides))
    legend = [li for li in page.select("li") if "data-engine" in li.attrs]
    expected: list[tuple[str, str | None]] = []
    for placement in plan["placements"]:
        expected.append((placement["key"], None))
        if placement["shared_with"]:
            expected.append((placement["key"], ", ".join(placement["shared_with"])))
    expected.append(("", None))  # free
    assert [(li.attrs["data-engine"], li.attrs.get("data-shared")) for li in legend] == expected
    # an engine's cells take one colour (striped when another engine shares them)
    cells = page.select("rect", "gpu")
    for placement in plan["placements"]:
        mine = {c.attrs["fill"] for c in cells if c.attrs["data-engine"] == placement["key"]}
        if placement["shared_with"]:
            assert len(mine) == 1
            assert next(iter(mine)).startswith("url(#co-")
        else:
            assert len(mine) == 1
            assert next(iter(mine)).startswith("#")
    # inference instances outlined: one outline per instance in each drawn row
    for engine in plan["engines"]:
        if engine["instances"] and engine["gpus"]:
            outlines = [
                r for r in page.select("rect", "inst") if r.attrs["data-engine"] == engine["key"]
            ]
            assert outlines, engine["key"]


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o))
def test_the_memory_bars_add_up_to_the_json_totals(
    overrides: tuple[str, ...], main_cli: MainCli
) -> None:
    plan = plan_of(main_cli, *overrides)
    html = html_of(main_cli, *overrides)
    page = Page(html)
    bars = {div.attrs["data-engine"]: div for div in page.select("div", "memory")}
    estimated = {e["key"]: e["memory"] for e in plan["engines"] if e["memory"]}
    assert set(bars) == set(estimated)
    # the terms of each bar, in page order: they follow their bar's div
    order = [e for e in page.elements if e.tag == "div" and "memory" in e.attrs.get("class", "")]
    terms: dict[str, int] = {}
    current = None
    for element in page.elements:
        if element in order:
            current = element.attrs["data-engine"]
        elif current and element.tag == "rect" and "term" in element.attrs.get("class", ""):
            terms[current] = terms.get(current, 0) + int(element.attrs["data-bytes"])
    for key, memory in estimated.items():
        assert int(bars[key].attrs["data-total"]) == memory["total"]
        assert terms[key] == max(memory["total"], sum(t["bytes"] for t in memory["terms"]))


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o))
def test_the_page_embeds_the_plan_json_and_explain_json_rank_groups(
    overrides: tuple[str, ...], main_cli: MainCli
) -> None:
    plan = plan_of(main_cli, *overrides)
    page = Page(html_of(main_cli, *overrides))
    assert json.loads(page.by_id("plan-json").text) == plan
    groups = json.loads(page.by_id("rank-groups").text)
    training = [e for e in plan["engines"] if e["active"] and e["instances"] is None]
    assert [g["key"] for g in groups] == [e["key"] for e in training]
    for engine in groups:
        explained = json.loads(run(main_cli, "explain", engine["spec"], "--json").stdout)
        assert engine["kinds"], engine["spec"]
        for kind, info in engine["kinds"].items():
            assert info["complete"]
            assert info["groups"] == explained["rank_groups"][kind]
            assert {k: info[k] for k in ("size", "count", "omitted")} == (
                explained["rank_group_counts"][kind]
            )
        # a radio button per kind, and a cell per rank
        radios = [i for i in page.select("input", "kind") if i.attrs["data-index"]]
        assert {r.attrs["value"] for r in radios} >= set(engine["kinds"])
    assert len(page.select("rect", "rank")) == sum(g["drawn"] for g in groups)


def test_a_hybrid_layout_offers_both_halves(main_cli: MainCli) -> None:
    page = Page(html_of(main_cli, *MOE_1024))
    labels = [e.text.strip() for e in page.select("label")]
    actor = [t for t in labels if t.startswith(("attn", "ffn"))]
    assert [t.split(":")[0] for t in actor[:7]] == [
        "attn tp",
        "attn cp",
        "attn dp",
        "attn pp",
        "ffn etp",
        "ffn ep",
        "ffn edp",
    ]


def test_the_rl_step_timeline_follows_the_mode(main_cli: MainCli) -> None:
    plan = plan_of(main_cli)
    page = Page(html_of(main_cli))
    (svg,) = page.select("svg", "timeline")
    pace = plan["pace"]
    assert (float(svg.attrs["data-step"]), svg.attrs["data-mode"]) == (
        pace["step_seconds"],
        pace["mode"],
    )
    bars = {b.attrs["data-name"]: b for b in page.select("rect", "bar")}
    assert float(bars["generation"].attrs["data-seconds"]) == pace["generate_seconds"]
    end = max(float(b.attrs["data-start"]) + float(b.attrs["data-seconds"]) for b in bars.values())
    assert end == pytest.approx(pace["step_seconds"])
    # the training engines one after another, after generation (synchronous)
    assert float(bars["actor"].attrs["data-start"]) == pace["generate_seconds"]


COLOCATED = (
    "cluster.n_nodes=1",
    "rollout.backend=sglang:d4t2",
    "++rollout.scheduling_strategy.type=colocation",
    "++rollout.scheduling_strategy.target=actor",
    "++enable_offload=true",
    "++actor.weight_update_mode=disk",
)


@pytest.mark.parametrize(
    ("overrides", "mode"),
    [(("+rollout.max_head_offpolicyness=2",), "asynchronous"), (COLOCATED, "colocated")],
)
def test_the_timeline_in_the_other_modes(
    overrides: tuple[str, ...], mode: str, main_cli: MainCli
) -> None:
    pace = plan_of(main_cli, *overrides)["pace"]
    page = Page(html_of(main_cli, *overrides))
    bars = {b.attrs["data-name"]: b for b in page.select("rect", "bar")}
    start = {name: float(b.attrs["data-start"]) for name, b in bars.items()}
    end = {name: start[name] + float(b.attrs["data-seconds"]) for name, b in bars.items()}
    assert pace["mode"] == mode
    assert max(end.values()) == pytest.approx(pace["step_seconds"])
    terms = [t["name"] for t in pace["step_terms"]]
    if mode == "asynchronous":  # training beside generation, the update after the slower
        assert start["actor"] == 0.0
        assert start[terms[0]] == max(pace["generate_seconds"], pace["train_seconds"])
    else:  # taking turns: training after generation, the update and offload/onload after
        assert start["actor"] == pace["generate_seconds"]
        assert terms == ["weight update (disk)", "offload/onload"]
        # the rollout's instances outlined on the actor's GPUs it shares
        outlines = [r.attrs["data-engine"] for r in page.select("rect", "inst")]
        assert outlines == ["rollout"] * 4


# --- no network, escaping ---------------------------------------------------------------


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o))
def test_nothing_is_fetched(overrides: tuple[str, ...], main_cli: MainCli) -> None:
    html = html_of(main_cli, *overrides)
    for outside in ("http://", "https://", "src=", "href=", "@import", "url(http", "//cdn"):
        assert outside not in html
    assert "default-src 'none'" in html


HOSTILE = "<img src=x onerror=alert(1)></script><!--"


def _renamed(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict):
        return {(new if k == old else k): _renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return new if value == old else value


def test_every_config_string_is_escaped(main_cli: MainCli) -> None:
    plan = _renamed(plan_of(main_cli), "actor", HOSTILE)
    plan["warnings"] = [HOSTILE]
    plan["engines"][1]["note"] = HOSTILE
    html = render_report(plan, title=HOSTILE)
    assert "<img" not in html
    assert "</script><!--" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;&lt;/script&gt;&lt;!--" in html
    page = Page(html)
    assert json.loads(page.by_id("plan-json").text) == plan  # the JSON ends where it should
    assert [e.attrs["data-engine"] for e in page.select("div", "memory")][1] == HOSTILE
    assert len(page.select("script")) == 3


# --- bounded: 131,072 nodes and more --------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        MOE_1024,
        ("cluster.n_nodes=131072", "rollout.backend=sglang:d100000t2"),
        # a million GPUs, every training engine as wide as it goes
        (
            "experiment=moe_32",
            "cluster.n_nodes=131072",
            "rollout.backend=sglang:d100000t3",
            "actor.backend=fsdp:d262144",
            "++critic.backend=megatron:d4096p4t16",
        ),
        # the widest node
        (
            "experiment=moe_32",
            "cluster.n_nodes=1024",
            f"cluster.n_gpus_per_node={MAX_GPUS_PER_NODE}",
            "rollout.backend=sglang:d200000t3",
            "actor.backend=megatron:d256p4t8e4",
        ),
    ],
    ids=["1024-moe", "131072-nodes", "million", "wide-nodes"],
)
def test_a_huge_cluster_stays_small(overrides: tuple[str, ...], main_cli: MainCli) -> None:
    html = html_of(main_cli, *overrides)
    page = Page(html)
    assert len(html.encode()) < MAX_BYTES
    assert len(page.select("rect", "gpu")) <= (MAX_ROWS + 1) * MAX_COLUMNS
    assert len(page.select("rect", "rank")) <= 4 * 1024


def test_the_worst_map_is_bounded() -> None:
    # a hand-made plan: every node different (one GPU run per node at a new offset)
    per_node, n_nodes = MAX_COLUMNS, 2048
    runs = [
        {"start": n * per_node + n % per_node, "stop": n * per_node + n % per_node + 1}
        for n in range(n_nodes)
    ]
    for run in runs:
        run.update(first_node=run["start"] // per_node, last_node=run["start"] // per_node)
    plan: dict[str, Any] = {
        "cluster": {
            "n_nodes": n_nodes,
            "n_gpus_per_node": per_node,
            "capacity": n_nodes * per_node,
            "cpu_only": False,
            "gpu": None,
            "gpu_memory": None,
        },
        "total_gpus": n_nodes,
        "engines": [
            {
                "key": "actor",
                "backend": f"fsdp:d{n_nodes}",
                "world_size": n_nodes,
                "gpus": n_nodes,
                "instances": None,
                "instance_size": None,
                "scheduling": {"type": "separation", "target": None},
                "active": True,
                "note": None,
                "memory": None,
            }
        ],
        "placements": [{"key": "actor", "shared_with": [], "gpu_ranges": runs}],
        "warnings": [],
        "assumptions": [],
        "pace": None,
    }
    html = render_report(plan)
    page = Page(html)
    rows = {c.attrs["data-row"] for c in page.select("rect", "gpu")}
    assert len(rows) == MAX_ROWS
    assert len(page.select("rect", "gpu")) == MAX_ROWS * per_node
    assert "… 2,008 more nodes in 2,008 rows …" in html
    assert len(html.encode()) < MAX_BYTES


@pytest.mark.parametrize(
    "spec", ["megatron:d4096p4t16", "fsdp:d262144", "megatron:(attn:d64p4t4c4|ffn:d32p4t2e16)"]
)
def test_past_the_drawn_ranks_each_kind_still_covers_every_drawn_rank(
    spec: str, main_cli: MainCli
) -> None:
    world = ModelAllocation.from_str(spec).world_size
    per_node = 8
    plan = {
        "cluster": {
            "n_nodes": world // per_node,
            "n_gpus_per_node": per_node,
            "capacity": world,
            "cpu_only": False,
        },
        "total_gpus": world,
        "engines": [
            {
                "key": "actor",
                "backend": spec,
                "world_size": world,
                "gpus": world,
                "active": True,
                "scheduling": {"type": "separation", "target": None},
            }
        ],
        "placements": [
            {
                "key": "actor",
                "shared_with": [],
                "gpu_ranges": [{"start": 0, "stop": world, "first_node": 0, "last_node": 0}],
            }
        ],
    }
    (engine,) = engine_groups(plan)
    assert engine.drawn == MAX_DRAWN_RANKS
    explained = json.loads(main_cli("explain", spec, "--json", "--groups", "1024").stdout)
    for kind, info in engine.kinds.items():
        ranks = sorted(r for g in info["groups"] for r in g)
        assert ranks == list(range(MAX_DRAWN_RANKS)), kind  # each drawn rank in one group
        assert not info["complete"]
        # explain's lists (16,384 ranks a kind), cut to the drawn ranks: the page's first ones
        listed = [[r for r in g if r < MAX_DRAWN_RANKS] for g in explained["rank_groups"][kind]]
        listed = [g for g in listed if g]
        assert info["groups"][: len(listed)] == listed, kind


def test_a_placement_of_many_runs_is_embedded_cut_and_counted(main_cli: MainCli) -> None:
    # 100,000 servers of 3 GPUs: two a node, a run per node (50,000 runs)
    overrides = (
        "experiment=moe_32",
        "cluster.n_nodes=131072",
        "rollout.backend=sglang:d100000t3",
        "actor.backend=fsdp:d262144",
    )
    plan = plan_of(main_cli, *overrides)
    html = html_of(main_cli, *overrides)
    embedded = json.loads(Page(html).by_id("plan-json").text)
    (rollout, actor) = plan["placements"]
    assert len(rollout["gpu_ranges"]) == 50_000
    cut = embedded["placements"][0]
    assert cut["gpu_ranges"] == rollout["gpu_ranges"][:MAX_EMBEDDED_RUNS]
    assert cut["gpu_ranges_omitted"] == 50_000 - MAX_EMBEDDED_RUNS
    assert embedded["placements"][1] == actor
    assert {k: v for k, v in embedded.items() if k != "placements"} == {
        k: v for k, v in plan.items() if k != "placements"
    }
    assert "(49,000 left out, counted in <code>gpu_ranges_omitted</code>)" in html


#: A Megatron actor of 4 pipeline ranks with 2 virtual stages each, its reference model
#: (megatron:d2p4 too, vpp 1) colocated: Qwen2.5-7B's 28 layers.
PIPELINED = (
    "experiment=grpo_2x8",
    "actor.backend=megatron:d2p4",
    "++actor.megatron.virtual_pipeline_parallel_size=2",
)


def test_the_layers_per_pipeline_rank_are_explain_jsons(main_cli: MainCli) -> None:
    plan = plan_of(main_cli, *PIPELINED)
    page = Page(html_of(main_cli, *PIPELINED))
    groups = {g["key"]: g for g in json.loads(page.by_id("rank-groups").text)}
    splits = {e["key"]: e["pipeline_split"] for e in plan["engines"] if e["pipeline_split"]}
    assert set(splits) == {"actor", "ref"}
    # the ref's split (vpp 1) is explain --json's: Qwen2.5-7B p4 is 6, 8, 8, 6 (the table of
    # tests/estimate/test_pipeline_split.py)
    explained = json.loads(
        run(
            main_cli, "explain", "megatron:d2p4", "--model", "Qwen/Qwen2.5-7B-Instruct", "--json"
        ).stdout
    )["pipeline_split"]
    assert splits["ref"] == explained
    assert explained["stage_layers"] == [6, 8, 8, 6]
    # the actor's 8 virtual stages: the embedding (152,064 × 3,584 ≈ 545M) weighs about 2.3
    # layers (≈ 233M each), so the middle stages hold 4 (932M; 5 would be 1,165M) and the
    # first and last 2 (2 × 233M + 545M ≈ 1,011M, the heaviest); rank r runs stages r and
    # r + 4: 2 + 4, 4 + 4, 4 + 4, 4 + 2
    actor = splits["actor"]
    assert (actor["vpp"], actor["stage_layers"]) == (2, [2, 4, 4, 4, 4, 4, 4, 2])
    assert [r["layers"] for r in actor["ranks"]] == [6, 8, 8, 6]
    assert [r["stages"] for r in actor["ranks"]] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # the embedded groups and the table of each engine show the plan's split
    current = None
    rows: dict[str, list[tuple[int, int]]] = {}
    for element in page.elements:
        if element.tag == "div" and "groups" in element.attrs.get("class", "").split():
            current = element.attrs["data-engine"]
        elif current and element.tag == "tr" and "stage" in element.attrs.get("class", ""):
            rows.setdefault(current, []).append(
                (int(element.attrs["data-rank"]), int(element.attrs["data-layers"]))
            )
    for key, split in splits.items():
        assert groups[key]["pipeline_split"] == split
        assert rows[key] == [(r["rank"], r["layers"]) for r in split["ranks"]]
    assert "rollout" not in rows


def test_no_split_table_for_p_1(main_cli: MainCli) -> None:
    overrides = ("experiment=grpo_2x8", "actor.backend=megatron:d4t2")
    plan = plan_of(main_cli, *overrides)
    assert all(e["pipeline_split"] is None for e in plan["engines"])
    assert not Page(html_of(main_cli, *overrides)).select("table", "split")
