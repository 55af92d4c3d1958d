"""Regenerate the report's screenshots in docs/images/ (docs/report.md, README.md).

    pip install -e '.[browser]'      # playwright; the browser is Debian's chromium
    python docs/make_screenshots.py

Each page is what ``areal-alloc … output=html`` writes, opened in headless chromium
(``/usr/bin/chromium``, or ``CHROMIUM=path``); each picture is one section of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

IMAGES = Path(__file__).parent / "images"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: The 1,024-GPU hybrid MoE layout of docs/report.md.
MOE_1024 = [
    "experiment=moe_32",
    "cluster.n_nodes=128",
    "rollout.backend=sglang:d64t8",
    "actor.backend='megatron:(attn:d8p4t4c4|ffn:d4p4t2e16)'",
]
#: picture -> (overrides, the section shown, the rank-group kind clicked first or None)
SHOTS: dict[str, tuple[list[str], str, str | None]] = {
    "report-cluster.png": ([], "body", None),
    "report-moe-ranks.png": (["experiment=moe_32"], "#groups", "ep"),
    "report-memory.png": ([], "#memory", None),
    "report-rl-step.png": ([], "#rl-step", None),
    "report-1024.png": (MOE_1024, "#cluster", None),
    "report-ppo-critic.png": (["experiment=ppo_critic"], "#cluster", None),
}


def page_of(overrides: list[str], folder: Path) -> Path:
    done = subprocess.run(
        ["areal-alloc", *overrides, "output=html"], capture_output=True, text=True, check=True
    )
    path = folder / "plan.html"
    path.write_text(done.stdout, encoding="utf-8")
    return path


def shoot(page: Page, name: str, selector: str, kind: str | None) -> None:
    if kind is not None:
        page.click(f'input.kind[data-index="0"][value="{kind}"]')
        page.hover('svg.ranks[data-index="0"] rect.rank[data-rank="0"]')
    target = IMAGES / name
    if selector == "body":  # the top of the page: title, engines, cluster and first groups
        page.screenshot(path=str(target), clip={"x": 0, "y": 0, "width": 1000, "height": 760})
    else:
        page.locator(selector).screenshot(path=str(target))
    print(f"{target}: {target.stat().st_size // 1024} KB")


def main() -> int:
    IMAGES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for name, (overrides, selector, kind) in SHOTS.items():
            page = browser.new_page(viewport={"width": 1000, "height": 800})
            page.goto(page_of(overrides, Path(folder)).as_uri())
            shoot(page, name, selector, kind)
            page.close()
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
