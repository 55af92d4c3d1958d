"""The report's ways in (issue 19): ``areal-alloc report``, ``output=html``, and the hook's
``hydra.callbacks.areal_alloc.report=true`` in a run and in a multirun, all in process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import AppRun, Cli, MainCli
from tests.report.test_report import said

USER_APP = Path(__file__).parents[1] / "apps" / "user_app" / "my_app.py"


def _embedded(html: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="plan-json">(.*?)</script>', html)
    assert found is not None
    plan: dict[str, Any] = json.loads(found.group(1))
    return plan


def test_output_html_is_the_page_of_the_plan_output_json_prints(main_cli: MainCli) -> None:
    page = main_cli("experiment=moe_32", "output=html")
    data = main_cli("experiment=moe_32", "output=json")
    assert (page.returncode, page.stderr) == (0, "")
    assert page.stdout.startswith("<!DOCTYPE html>")
    assert page.stdout.endswith("</html>\n")
    assert _embedded(page.stdout) == json.loads(data.stdout)


def test_report_writes_the_apps_page_to_a_file_or_to_stdout(
    main_cli: MainCli, tmp_path: Path
) -> None:
    app = main_cli("experiment=moe_32", "output=html").stdout
    ran = main_cli("report", "experiment=moe_32", "-o", "plan.html")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    assert (tmp_path / "plan.html").read_text(encoding="utf-8") == app
    for argv in (["report", "experiment=moe_32"], ["report", "-o", "-", "experiment=moe_32"]):
        ran = main_cli(*argv)
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, app, "")


def test_report_composes_a_file_as_check_does(main_cli: MainCli, data: Path) -> None:
    path = str(data / "real_grpo.yaml")
    checked = main_cli("check", path, "actor.backend=fsdp:d4t2", "--json", "--gpu", "H800")
    ran = main_cli("report", "--config", path, "actor.backend=fsdp:d4t2", "--gpu", "H800")
    assert (checked.returncode, ran.returncode, ran.stderr) == (0, 0, "")
    assert _embedded(ran.stdout) == json.loads(checked.stdout)
    assert f"<h1>{path}</h1>" in ran.stdout


def test_a_setting_flag_reaches_the_app_as_the_hooks_parameter(main_cli: MainCli) -> None:
    ran = main_cli("report", "--gpu", "H800")
    plan = _embedded(ran.stdout)
    assert (plan["cluster"]["gpu"], plan["cluster"]["gpu_source"]) == (
        "H800",
        "hydra.callbacks.areal_alloc.gpu",
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["report", "-o", "no/such/folder/plan.html"],
            "areal-alloc report: cannot write 'no/such/folder/plan.html': No such file or "
            "directory",
        ),
        (
            ["report", "a.yaml", "b.yaml"],
            "areal-alloc report: one experiment file per page, got 2: 'a.yaml', 'b.yaml'; "
            "usage: areal-alloc report [--config FILE] [key=value …] [-o plan.html]",
        ),
        (
            ["report", "actor.backend=fsdp:d4p2", "-o", "plan.html"],
            "areal-alloc: actor.backend='fsdp:d4p2': FSDP backend only supports "
            "data/tensor/context parallelism (d, t, c), got pipeline parallelism (p2); use "
            "megatron or archon for p\n    fsdp:d4p2\n           ^",  # with its caret
        ),
        (
            ["report", "experiment=moe_32", "plan.html"],  # -o forgotten
            "areal-alloc report: 'plan.html' names a page, not an experiment file: to write "
            "the page there, give -o 'plan.html'; usage: areal-alloc report [--config FILE] "
            "[key=value …] [-o plan.html]",
        ),
        (
            ["output=pdf"],
            "areal-alloc: output='pdf': must be 'text', 'json' or 'html'",
        ),
    ],
)
def test_every_error_is_one_line_and_no_file_is_left(
    argv: list[str], error: str, main_cli: MainCli, tmp_path: Path
) -> None:
    ran = main_cli(*argv)
    assert (ran.returncode, ran.stdout) == (1, "")
    assert said(ran.stderr) == error.splitlines()  # beside the hook's warnings, if any
    assert not (tmp_path / "plan.html").exists()


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        # a folder that does not exist, and a regular file taken as a folder: unwritable for
        # every user (a read-only folder is not: root, which runs the suite here, writes there)
        ("missing/plan.html", "No such file or directory"),
        ("a-file/plan.html", "Not a directory"),
    ],
)
def test_an_unwritable_file_is_one_line(
    main_cli: MainCli, tmp_path: Path, where: str, reason: str
) -> None:
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    ran = main_cli("report", "-o", where)  # in tmp_path
    assert (ran.returncode, ran.stdout) == (1, "")
    assert ran.stderr == f"areal-alloc report: cannot write {where!r}: {reason}\n"
    assert not (tmp_path / where).exists()


# --- the hook --------------------------------------------------------------------------


def _user_app(app_in_process: AppRun, tmp_path: Path, *args: str) -> tuple[int, str]:
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    ran = app_in_process(USER_APP, *args, cwd=tmp_path, env={"MARKER_DIR": str(markers)})
    return ran.returncode, ran.stderr


def test_the_hook_writes_plan_html_into_the_runs_folder(
    app_in_process: AppRun, tmp_path: Path
) -> None:
    code, err = _user_app(
        app_in_process,
        tmp_path,
        "hydra.run.dir=out",
        "hydra.callbacks.areal_alloc.report=true",
    )
    assert (code, err) == (0, "")
    plan = _embedded((tmp_path / "out" / "plan.html").read_text(encoding="utf-8"))
    assert [e["backend"] for e in plan["engines"]] == ["sglang:d2t4", "fsdp:d4t2"]


def test_the_hook_writes_one_page_per_job_of_a_multirun(
    app_in_process: AppRun, tmp_path: Path
) -> None:
    code, err = _user_app(
        app_in_process,
        tmp_path,
        "-m",
        "actor.backend=fsdp:d8,fsdp:d4t2",
        "hydra.sweep.dir=multi",
        "hydra.callbacks.areal_alloc.report=true",
    )
    assert code == 0, err
    pages = sorted((tmp_path / "multi").glob("*/plan.html"))
    assert [p.parent.name for p in pages] == ["0", "1"]
    backends = [_embedded(p.read_text(encoding="utf-8"))["engines"][1]["backend"] for p in pages]
    assert backends == ["fsdp:d8", "fsdp:d4t2"]


def test_without_report_the_hook_writes_no_page(app_in_process: AppRun, tmp_path: Path) -> None:
    code, err = _user_app(app_in_process, tmp_path, "hydra.run.dir=out")
    assert (code, err) == (0, "")
    assert not (tmp_path / "out" / "plan.html").exists()


def test_a_report_value_that_is_no_boolean_is_one_line(
    app_in_process: AppRun, tmp_path: Path
) -> None:
    code, err = _user_app(
        app_in_process, tmp_path, "hydra.run.dir=out", "hydra.callbacks.areal_alloc.report=yes"
    )
    assert (code, err) == (
        1,
        "areal-alloc: hydra.callbacks.areal_alloc.report='yes': must be true or false\n",
    )


def test_the_hook_imports_the_report_only_when_asked() -> None:
    # a fresh interpreter: the hook's module and the plugin import nothing of the report
    import subprocess
    import sys

    code = (
        "import sys, hydra_plugins.areal_alloc.areal_alloc_searchpath, areal_alloc.hydra_hook\n"
        "print(sorted(m for m in sys.modules if m.startswith('areal_alloc.report')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")


@pytest.mark.parametrize("value", ["H800", "a\\b", "a\\", "a\\'b", "it's", "\\\\'", "x=y z"])
def test_a_setting_flag_reaches_the_hook_as_given(value: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from areal_alloc.cli.report import _hook_override

    parsed = OverridesParser.create().parse_override(_hook_override("gpu", value))
    assert (parsed.key_or_group, parsed.value()) == ("hydra.callbacks.areal_alloc.gpu", value)


def test_a_page_cut_short_is_not_left_behind(cli: Cli, tmp_path: Path) -> None:
    # a file size limit of 8 KiB (ulimit -f 8): the write fails part way, as on a full disk
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    ran = cli("report", "-o", "plan.html", preexec_fn=limited)
    assert (ran.returncode, ran.stdout) == (1, "")
    assert ran.stderr == "areal-alloc report: cannot write 'plan.html': File too large\n"
    assert not (tmp_path / "plan.html").exists()


def test_a_report_the_hook_cannot_draw_leaves_no_page(
    app_in_process: AppRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(plan: object, title: str = "") -> str:
        raise RuntimeError("no page")

    monkeypatch.setattr("areal_alloc.report._page.render_report", broken)
    code, err = _user_app(
        app_in_process, tmp_path, "hydra.run.dir=out", "hydra.callbacks.areal_alloc.report=true"
    )
    assert (code, err) == (
        0,
        "areal-alloc: could not write the report plan.html (RuntimeError: no page)\n",
    )
    assert not (tmp_path / "out" / "plan.html").exists()
