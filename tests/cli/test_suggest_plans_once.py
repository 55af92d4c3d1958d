"""``suggest --config`` runs the experiment's plan once (issue 29, item 1): the cluster, the
engines and the current pace all come from the one plan check would make; and ``check``
builds the plan's JSON and works out the balance advice once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from areal_alloc.cli import main, suggest_config

EXPERIMENT = Path(__file__).parents[2] / "conf/app/experiment/grpo_2x8.yaml"


def test_suggest_config_plans_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from areal_alloc.plan import plan_config as real

    planned: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        planned.append(str(kwargs.get("on_memory")))
        return real(*args, **kwargs)

    monkeypatch.setattr(suggest_config, "plan_config", counted)
    assert main(["suggest", "--config", str(EXPERIMENT), "--gpu", "H100-80GB", "--top", "1"]) == 0
    assert planned == ["warn"]
    assert "current split (the plan's pace)" in capsys.readouterr().out


@pytest.mark.parametrize(("flags", "built"), [((), 1), (("--json",), 1)])
def test_check_builds_the_plans_json_once(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    built: int,
) -> None:
    from areal_alloc.plan import Plan

    made: list[int] = []
    real = Plan.to_dict

    def counted(self: Plan) -> dict[str, Any]:
        made.append(1)
        return real(self)

    # once: for the node map's rows (text) or to print it (--json), not again beside them
    monkeypatch.setattr(Plan, "to_dict", counted)
    assert main(["check", str(EXPERIMENT), "--gpu", "H100-80GB", *flags]) == 0
    assert len(made) == built
    capsys.readouterr()


@pytest.mark.parametrize("flags", [(), ("--json",)])
def test_check_works_out_the_balance_advice_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]
) -> None:
    from areal_alloc.estimate import advice, pace

    made: list[str] = []
    real = advice.balance_advice

    def counted(*args: Any, **kwargs: Any) -> str:
        made.append(real(*args, **kwargs))
        return made[-1]

    # once, when the plan's pace is made: its text and its JSON print that line
    monkeypatch.setattr(pace, "balance_advice", counted)
    assert main(["check", str(EXPERIMENT), "--gpu", "H100-80GB", *flags]) == 0
    assert len(made) == 1
    out = capsys.readouterr().out
    assert (json.dumps(made[0]) if flags else made[0]) in out
