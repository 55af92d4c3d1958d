"""The HTML report in a real headless browser (Debian's chromium, driven by Playwright): what
a person sees of the built-in experiments and of a 1,024-GPU hybrid MoE layout.

Skipped with the reason when Playwright or /usr/bin/chromium is absent (the README's test
command in a fresh venv has neither); ``AREAL_ALLOC_REQUIRE_BROWSER=1`` (CI, ``.ci/run``)
turns the skip into a failure. Screenshots stay in the test's temporary folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MainCli
from tests.report.test_report import CASES, MOE_1024, html_of, plan_of, run

CHROMIUM = Path("/usr/bin/chromium")
#: Chromium's flags for a sandbox-less, offline, quiet headless run.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _absent(reason: str) -> None:
    if os.environ.get("AREAL_ALLOC_REQUIRE_BROWSER") == "1":
        pytest.fail(f"AREAL_ALLOC_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _absent("playwright is not installed (pip install -e '.[browser]')")
    if not CHROMIUM.exists():
        _absent(f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


class Seen:
    """One page opened from its file, with what the console said and what it requested."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = path.as_uri()
        self.page.goto(self.url)

    def evaluate(self, script: str, arg: Any = None) -> Any:
        return self.page.evaluate(script, arg)


def _open(browser: Any, main_cli: MainCli, tmp_path: Path, overrides: tuple[str, ...]) -> Seen:
    path = tmp_path / "plan.html"
    path.write_text(html_of(main_cli, *overrides), encoding="utf-8")
    return Seen(browser, path)


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o))
def test_what_a_person_sees(
    overrides: tuple[str, ...], browser: Any, main_cli: MainCli, tmp_path: Path
) -> None:
    plan = plan_of(main_cli, *overrides)
    seen = _open(browser, main_cli, tmp_path, overrides)
    seen.page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert seen.errors == []
    assert seen.requests == [seen.url]  # the file itself, nothing else
    per_node = plan["cluster"]["n_gpus_per_node"]

    # one visible cell per GPU of each drawn row (a row: a node or a merged run of nodes)
    cells = seen.evaluate(
        """() => [...document.querySelectorAll('svg.cluster rect.gpu')].map(c => {
             const box = c.getBoundingClientRect();
             return {row: c.dataset.row, engine: c.dataset.engine,
                     fill: getComputedStyle(c).fill, w: box.width, h: box.height};
           })"""
    )
    rows = list(dict.fromkeys(c["row"] for c in cells))
    assert len(cells) == len(rows) * per_node
    assert all(c["w"] > 5 and c["h"] > 5 for c in cells)

    # each engine in one colour, the colour of its legend entry; the free GPUs dotted
    legend = seen.evaluate(
        """() => [...document.querySelectorAll('ul.legend li[data-engine]')].map(li => ({
             engine: li.dataset.engine, shared: li.dataset.shared || null,
             fill: getComputedStyle(li.querySelector('rect')).fill}))"""
    )
    swatch = {(item["engine"], item["shared"]): item["fill"] for item in legend}
    for placement in plan["placements"]:
        key = placement["key"]
        fills = {c["fill"] for c in cells if c["engine"] == key}
        shared = ", ".join(placement["shared_with"]) or None
        assert fills == {swatch[(key, shared)]}, key
    colours = [swatch[(p["key"], None)] for p in plan["placements"] if not p["shared_with"]]
    assert len(set(colours)) == len(colours)  # engines told apart

    # the memory bars: their terms add up to the JSON's totals
    bars = seen.evaluate(
        """() => [...document.querySelectorAll('div.memory')].map(d => ({
             engine: d.dataset.engine, total: Number(d.dataset.total),
             terms: [...d.querySelectorAll('rect.term')].reduce(
               (s, r) => s + Number(r.dataset.bytes), 0),
             width: [...d.querySelectorAll('rect.term')].reduce(
               (s, r) => s + r.getBoundingClientRect().width, 0)}))"""
    )
    totals = {e["key"]: e["memory"]["total"] for e in plan["engines"] if e["memory"]}
    assert {b["engine"]: b["total"] for b in bars} == totals
    for bar in bars:
        assert bar["terms"] == bar["total"]
        assert bar["width"] > 0


def _groups_now(seen: Seen, index: int) -> dict[int, list[int]]:
    """The drawn ranks by the group the page coloured them with."""
    cells = seen.evaluate(
        """(i) => [...document.querySelectorAll(`svg.ranks[data-index="${i}"] rect.rank`)]
             .map(c => [Number(c.dataset.rank), c.dataset.group === undefined ? -1
                        : Number(c.dataset.group), getComputedStyle(c).fill])""",
        index,
    )
    groups: dict[int, list[int]] = {}
    for rank, group, _ in cells:
        groups.setdefault(group, []).append(rank)
    fills: dict[int, set[str]] = {}
    for _, group, fill in cells:
        fills.setdefault(group, set()).add(fill)
    assert all(len(f) == 1 for f in fills.values())  # one colour per group
    return groups


@pytest.mark.parametrize(
    "overrides", [("experiment=moe_32",), ("experiment=grpo_2x8",), MOE_1024], ids=str
)
def test_the_rank_group_overlay_switches_to_explain_jsons_groups(
    overrides: tuple[str, ...], browser: Any, main_cli: MainCli, tmp_path: Path
) -> None:
    seen = _open(browser, main_cli, tmp_path, overrides)
    engines = json.loads(seen.evaluate("() => document.getElementById('rank-groups').textContent"))
    actor = engines[0]
    explained = json.loads(run(main_cli, "explain", actor["spec"], "--json").stdout)
    before = None
    for kind in actor["kinds"]:
        seen.page.click(f'input.kind[data-index="0"][value="{kind}"]')
        now = _groups_now(seen, 0)
        assert [now[i] for i in sorted(now)] == explained["rank_groups"][kind], kind
        assert now != before  # the highlighted set changed
        before = now
        # hover a rank: its group is outlined and its title lists the group's ranks
        last = explained["rank_groups"][kind][-1]
        seen.page.hover(f'svg.ranks[data-index="0"] rect.rank[data-rank="{last[0]}"]')
        outlined = seen.evaluate(
            """() => [...document.querySelectorAll('svg.ranks[data-index="0"] rect.hl')]
                 .map(c => Number(c.dataset.rank))"""
        )
        assert outlined == last
        title = seen.evaluate(
            f"""() => document.querySelector(
                 'svg.ranks[data-index="0"] rect.rank[data-rank="{last[0]}"] title').textContent"""
        )
        assert f"{kind} group {len(explained['rank_groups'][kind]) - 1} of " in title
        seen.page.screenshot(path=str(tmp_path / f"ranks-{kind}.png"))
    assert seen.errors == []


def test_the_json_view_opens_with_the_plan(browser: Any, main_cli: MainCli, tmp_path: Path) -> None:
    plan = plan_of(main_cli)
    seen = _open(browser, main_cli, tmp_path, ())
    seen.page.click("details summary")
    seen.page.wait_for_function("() => document.getElementById('json-view').textContent")
    shown = seen.evaluate("() => document.getElementById('json-view').textContent")
    assert json.loads(shown) == plan
    assert seen.errors == []
