"""Every module imports on its own, first, in a fresh interpreter; the package stays light."""

from __future__ import annotations

import ast
import os
import pkgutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import areal_alloc

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(areal_alloc.__path__, "areal_alloc.")
    if not m.name.startswith("areal_alloc.conf")
)


# One fresh interpreter that imports nothing of ours and forks once per module: each
# child imports its module first, as ``python -c "import M"`` would, without paying
# the interpreter's start-up once per module. It prints (module, exit status, output).
# omegaconf is imported once before the forks: every module of ours is under
# ``areal_alloc``, whose ``__init__`` imports it (its resolvers) before any of them runs.
_IMPORT_EACH_FIRST = """\
import os, sys
import omegaconf
assert not [m for m in sys.modules if m.split('.')[0] in ('areal_alloc', 'hydra_plugins')]
for name in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 1)
        os.dup2(write, 2)
        try:
            __import__(name)
        except BaseException:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    os.close(write)
    with os.fdopen(read, 'rb') as pipe:
        output = pipe.read().decode(errors='replace')
    _, status = os.waitpid(pid, 0)
    print(repr((name, status, output)))
"""


@pytest.fixture(scope="module")
def imported_first() -> dict[str, tuple[int, str]]:
    """Each module's exit status and output, imported first in a fresh interpreter."""
    if not hasattr(os, "fork"):  # one interpreter per module, then
        runs = {
            m: subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True, text=True)
            for m in MODULES
        }
        return {m: (done.returncode, done.stderr) for m, done in runs.items()}
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_FIRST, *MODULES], capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    results = [ast.literal_eval(line) for line in done.stdout.splitlines()]
    assert [name for name, _, _ in results] == MODULES
    return {name: (status, output) for name, status, output in results}


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_first(module: str, imported_first: dict[str, tuple[int, str]]) -> None:
    status, output = imported_first[module]
    assert status == 0, output


def test_import_areal_alloc_is_light_and_registers_resolvers() -> None:
    code = (
        "import sys, areal_alloc\n"
        "from omegaconf import OmegaConf\n"
        "heavy = [m for m in ('lark', 'hydra', 'areal_alloc._parse', 'areal_alloc.plan') "
        "if m in sys.modules]\n"
        "print(heavy, OmegaConf.has_resolver('alloc.world_size'))\n"
        "print(areal_alloc.ModelAllocation.from_str('fsdp:d4').world_size)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.splitlines() == ["[] True", "4"], done.stderr


def test_the_parse_cache_lives_in_a_private_user_folder(tmp_path: Path) -> None:
    code = "import areal_alloc; print(areal_alloc.ModelAllocation.from_str('fsdp:d4t2'))"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    for _ in range(2):  # parses and saves, then loads
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (0, "fsdp:d4t2\n", "")
    folder = tmp_path / "areal-alloc"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    # JSON only: lark's grammar cache is a pickle and is never written or read
    (cache,) = folder.iterdir()
    assert cache.name.startswith("parsed-")
    assert cache.suffix == ".json"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600


def test_a_string_parsed_in_an_earlier_run_needs_no_lark(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = (
        "import sys, areal_alloc\n"
        "a = areal_alloc.ModelAllocation.from_str('megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)')\n"
        "print(a, 'lark' in sys.modules)\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.stdout for r in runs] == [
        "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2) True\n",
        "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2) False\n",
    ], runs[0].stderr + runs[1].stderr
    # errors are never cached: each run gets the parser's message
    bad = "import areal_alloc\ntry:\n    areal_alloc.ModelAllocation.from_str('fsdp:d4)')\n"
    bad += "except areal_alloc.AllocationError as e:\n    print(e.message)\n"
    again = [
        subprocess.run([sys.executable, "-c", bad], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert again[0].stdout == again[1].stdout != ""


def test_a_damaged_parse_cache_is_ignored(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = "import areal_alloc; print(areal_alloc.ModelAllocation.from_str('fsdp:d4t2'))"
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    (cache,) = (tmp_path / "areal-alloc").glob("parsed-*.json")
    for damage in ('{"single": {"fsdp:d4t2": [1, 2]}}', "not json", '["x"]'):
        cache.write_text(damage)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (0, "fsdp:d4t2\n", "")


def test_without_a_writable_cache_it_still_parses(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    code = "import areal_alloc; print(areal_alloc.ModelAllocation.from_str('fsdp:d4t2'))"
    env = {**os.environ, "XDG_CACHE_HOME": str(blocker)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "fsdp:d4t2\n", "")


# --- the layers: imports flow one way, as the data does --------------------------------

#: The experiment's readers of a section (areal_alloc.experiment.sections): the parts the
#: records hold (below experiment.records), then the readers that fill the records.
_SECTION_PARTS = [
    "areal_alloc.experiment.sections.values",
    "areal_alloc.experiment.sections.model",
    "areal_alloc.experiment.sections.megatron",
    "areal_alloc.experiment.sections.archon",
    "areal_alloc.experiment.sections.lora",
    "areal_alloc.experiment.sections.fsdp",
    "areal_alloc.experiment.sections.scheduling",
]
_SECTION_READERS = [
    "areal_alloc.experiment.sections.train",
    "areal_alloc.experiment.sections.cluster",
    "areal_alloc.experiment.sections.engines",
    "areal_alloc.experiment.sections.run",
    "areal_alloc.experiment.sections.servers",
]

#: Every module of the package, lowest layer first: string → syntax → model → plan →
#: Hydra / Ray / command line. A module may import only modules listed before it.
LAYERS = [
    # vocabulary: imports nothing of ours
    "areal_alloc.errors",
    "areal_alloc.limits",
    "areal_alloc.defaults",
    "areal_alloc.numbers",
    "areal_alloc.vocab",
    "areal_alloc.kinds",
    "areal_alloc._config",
    # the experiment: which model each engine runs, the nulls and the settings the
    # reference's loader refuses
    "areal_alloc.experiment.models",
    "areal_alloc.experiment.nulls",
    "areal_alloc.experiment.loader",
    "areal_alloc.files",
    # string → syntax
    "areal_alloc._syntax",
    "areal_alloc._cache",
    "areal_alloc._verdicts",
    "areal_alloc._parse",
    # syntax → model
    "areal_alloc.strategy",
    "areal_alloc.format",
    "areal_alloc._build",
    "areal_alloc.model",
    "areal_alloc.legacy",
    # the experiment's every key against the reference's schema (names the rollout's layout)
    "areal_alloc.experiment.reference_keys",
    "areal_alloc.model_shape",
    # model → memory: the model's architecture, the catalogues, the estimate
    "areal_alloc.architecture",
    "areal_alloc.catalogue",
    "areal_alloc.settings",
    # the experiment: its one reading (a reader per section, the frozen records, the
    # orchestrator), shapes and the reference's start-up rules
    "areal_alloc.experiment.sections",
    *_SECTION_PARTS,
    "areal_alloc.experiment.records",
    *_SECTION_READERS,
    # each engine's details after its backend, through the readers above
    "areal_alloc.experiment.sections.details",
    "areal_alloc.experiment.read",
    "areal_alloc.experiment",
    "areal_alloc.experiment.shapes",
    "areal_alloc.experiment.rules",
    "areal_alloc.experiment.server_rules",
    "areal_alloc.experiment.checks",
    # the estimates: memory, step times, the RL step, calibration
    "areal_alloc.estimate",
    # every choice the estimates make by backend, in one table
    "areal_alloc.estimate.backends",
    "areal_alloc.estimate.calibration",
    "areal_alloc.estimate.system",
    "areal_alloc.estimate.execution",
    "areal_alloc.estimate.pipeline_split",
    "areal_alloc.estimate.margin",
    "areal_alloc.estimate.memory",
    "areal_alloc.estimate.activations",
    "areal_alloc.estimate.memory_sharding",
    "areal_alloc.estimate.memory_training",
    "areal_alloc.estimate.memory_inference",
    "areal_alloc.estimate.engines",
    "areal_alloc.estimate.speed",
    "areal_alloc.estimate.speed_host",
    "areal_alloc.estimate.speed_training",
    "areal_alloc.estimate.speed_inference",
    "areal_alloc.estimate.step_mode",
    "areal_alloc.estimate.advice",
    "areal_alloc.estimate.rl_step",
    # an experiment's pace by the one RL-step model
    "areal_alloc.estimate.pace",
    # one layout's memory and step as the search ranks it
    "areal_alloc.estimate.layout",
    # the search: layouts ranked, the split between rollout and training
    "areal_alloc.search",
    # what the split search takes, read from flags or an experiment
    "areal_alloc.search.inputs",
    "areal_alloc.search.layouts",
    "areal_alloc.search.ranking",
    "areal_alloc.search.fitting",
    "areal_alloc.search.proposal",
    "areal_alloc.search.split",
    # model → plan
    "areal_alloc.placement",
    "areal_alloc.estimate.host",
    "areal_alloc.plan",
    # the leaves
    "areal_alloc.rankgroups",
    "areal_alloc.ray_placement",
    "areal_alloc.compose",
    "areal_alloc.schema",
    "areal_alloc.resolvers",
    "areal_alloc.sweep",
    # the plan as one HTML page (the hook writes it on request)
    "areal_alloc.report._grid",
    "areal_alloc.report._groups",
    "areal_alloc.report._page",
    "areal_alloc.report",
    "areal_alloc.hydra_hook",
    # the command line
    "areal_alloc.cli.node_map",
    "areal_alloc.cli.render",
    "areal_alloc.cli.memory_text",
    "areal_alloc.cli.args",
    # the flags the subcommands share and what they give, then one module a subcommand
    "areal_alloc.cli.flags",
    "areal_alloc.cli.machine",
    "areal_alloc.cli.estimate_lines",
    "areal_alloc.cli.speed",
    "areal_alloc.cli.layout_text",
    "areal_alloc.cli.explain",
    "areal_alloc.cli.migrate",
    "areal_alloc.cli.layouts_model",
    "areal_alloc.cli.layouts",
    "areal_alloc.cli.check",
    "areal_alloc.cli.calibrate",
    "areal_alloc.cli.suggest_config",
    "areal_alloc.cli.suggest",
    # the app before report: report composes the built-in experiment with it
    "areal_alloc.cli.app",
    "areal_alloc.cli.report",
    "areal_alloc.cli.commands",
    "areal_alloc.cli",
    "areal_alloc",
]


def _source(module: str) -> Path:
    base = Path(areal_alloc.__file__).parent.parent
    path = base.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _imports(module: str) -> set[str]:
    """Every areal_alloc module ``module`` imports, anywhere (functions, TYPE_CHECKING)."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    package = module if _source(module).name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            # `from areal_alloc.cli import render` imports a submodule
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in LAYERS else base for a in node.names
            ]
        else:
            continue
        for name in names:
            if name == "areal_alloc" or name.startswith("areal_alloc."):
                while name not in LAYERS:
                    name = name.rpartition(".")[0]
                found.add(name)
    found.discard(module)
    return found


def test_every_module_has_a_layer() -> None:
    assert sorted(LAYERS) == sorted([*MODULES, "areal_alloc"])


@pytest.mark.parametrize("module", LAYERS)
def test_imports_only_go_down(module: str) -> None:
    level = LAYERS.index(module)
    upward = sorted(name for name in _imports(module) if LAYERS.index(name) >= level)
    assert upward == [], f"{module} imports {upward}, which are not below it"


def test_the_layer_test_sees_imports() -> None:
    # guards the test itself: known edges are found, including in-function ones
    assert {"areal_alloc._parse", "areal_alloc._build"} <= _imports("areal_alloc.model")
    assert "areal_alloc.plan" in _imports("areal_alloc.resolvers")
    assert "areal_alloc.cli.commands" in _imports("areal_alloc.cli")


#: The only modules that read a raw config: the experiment's one reading (its orchestrator
#: and a reader per section, with the reference's rules of which model an engine runs and
#: which keys it refuses as null), and the settings' last source, the config's own
#: ``cluster`` keys (areal_alloc.settings, issue 16 item 3). The start-up rules read the
#: typed ``Experiment.startup`` the reading gives them.
READS_THE_RAW_CONFIG = {
    "areal_alloc.experiment.models",
    "areal_alloc.experiment.nulls",
    "areal_alloc.experiment.reference_keys",
    "areal_alloc.experiment.loader",
    "areal_alloc.experiment.read",
    *_SECTION_PARTS,
    *_SECTION_READERS,
    "areal_alloc.settings",
}


#: The most of the package's modules one module may import (issue 29): a module that needs
#: more does more than one thing, and its parts belong in modules of their own.
MAX_IMPORTED = 12


@pytest.mark.parametrize("module", LAYERS)
def test_no_module_imports_more_than_a_dozen_of_the_package(module: str) -> None:
    imported = _imports(module)
    assert len(imported) <= MAX_IMPORTED, sorted(imported)


def test_only_the_experiment_reads_the_raw_config() -> None:
    readers = {module for module in LAYERS if "areal_alloc._config" in _imports(module)}
    assert readers == READS_THE_RAW_CONFIG


@pytest.mark.parametrize(
    "module",
    [
        "areal_alloc.plan",
        "areal_alloc.estimate.engines",
        "areal_alloc.estimate.pace",
        "areal_alloc.search.inputs",
    ],
)
def test_the_consumers_take_the_experiment(module: str) -> None:
    # plan, memory, speed and suggest --config read the record experiment.read fills
    assert "areal_alloc.experiment.records" in _imports(module)


def test_every_package_folder_ships_in_the_wheel() -> None:
    """pyproject.toml lists the packages by name (hydra_plugins stays a namespace): a new
    folder of modules must be listed, or the installed package cannot import it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and newer

    root = Path(__file__).parents[1]
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        ".".join(init.parent.relative_to(root).parts)
        for init in (root / "areal_alloc").rglob("__init__.py")
        if "conf" not in init.parent.relative_to(root).parts  # areal_alloc/conf is a link
    }
    assert folders - listed == set()


def test_check_imports_no_search() -> None:
    """``check`` validates and plans an experiment: the layout search and the split search
    (areal_alloc.search) are not imported for it, each subcommand's module only when run
    (areal_alloc.cli.commands)."""
    experiment = Path(areal_alloc.__file__).parents[1] / "conf/app/experiment/grpo_2x8.yaml"
    code = (
        "import sys\n"
        "from areal_alloc.cli import main\n"
        f"assert main(['check', {str(experiment)!r}, '--quiet']) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('areal_alloc.search')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


#: Each test folder and the package folder it covers (issue 29, item 6): a test's home says
#: what it covers. ``core``: the package's own top-level modules; ``hydra``: the hook and
#: hydra_plugins; ``benchmarks``: benchmarks/; ``apps`` and ``data``: fixtures, no tests.
TEST_HOMES = {
    "core": "areal_alloc",
    "cli": "areal_alloc/cli",
    "estimate": "areal_alloc/estimate",
    "experiment": "areal_alloc/experiment",
    "report": "areal_alloc/report",
    "search": "areal_alloc/search",
    "hydra": "hydra_plugins",
    "benchmarks": "benchmarks",
    "apps": None,
    "data": None,
}


def test_the_tests_mirror_the_package() -> None:
    root = Path(__file__).parents[1]
    folders = {p.name for p in (root / "tests").iterdir() if p.is_dir() and p.name[0] != "_"}
    assert folders - {"__pycache__"} == set(TEST_HOMES)
    packages = {
        str(init.parent.relative_to(root))
        for init in (root / "areal_alloc").rglob("__init__.py")
        if "conf" not in init.parent.relative_to(root).parts
        and init.parent.name != "sections"  # tested with the experiment it reads
    }
    assert packages <= {home for home in TEST_HOMES.values() if home}
    for folder, home in TEST_HOMES.items():
        if home is not None:
            assert (root / home).is_dir(), folder
            assert list((root / "tests" / folder).glob("test_*.py")), folder
