"""The package's layers import downward only: no import circle, and no module imports a layer
above its own (``hisparse_model/layers.py`` declares the layers once); imports inside
functions count too.

The graph is built from the source with ``ast``: every ``import`` / ``from ... import``
statement anywhere in a module (module level, inside functions, under ``if``) is an edge to
the package's module it names (``from . import x`` names the submodule ``x`` when there is
one).  A circle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from hisparse_model.layers import LAYERS, import_graph, layer_of
from hisparse_model.model.knobs import Knobs
from hisparse_model.answers.simulate import simulate
from hisparse_model.schedule.workload import Workload

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "hisparse_model"
TOP_MODULES = 12  # at most this many modules directly under hisparse_model/ (issue 41)
MAX_LINES = 400  # no module longer


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def upward(graph: dict[str, set[str]], layer=layer_of) -> list[tuple[str, str]]:
    """(module, module of a higher layer it imports)."""
    return sorted((m, t) for m, targets in graph.items() for t in targets
                  if layer(t) > layer(m))


GRAPH = import_graph(PACKAGE)


def test_no_import_circle():
    """No module of hisparse_model/ (engine/ included) reaches itself through its imports."""
    assert circles(GRAPH) == []


def test_no_layer_imports_one_above_it():
    """Every import goes to the importer's own layer or one below (layers.py's order)."""
    assert upward(GRAPH) == []


def test_every_subpackage_is_a_declared_layer_and_says_what_it_is():
    """Each folder of hisparse_model/ with code is a layer, its __init__ says what it is for."""
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == {name for name, _ in LAYERS if name}
    for name in folders:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc and "Imports" in doc or name in ("views", "engine", "crosscheck"), name


def test_the_top_is_small_and_no_module_is_long():
    """At most a dozen modules directly under hisparse_model/; none over 400 lines."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_MODULES, top
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_architecture_picture_is_drawn_from_todays_code():
    """docs/ARCHITECTURE.md's picture is what scripts/architecture.py draws from the imports
    today, and every file it names for a change exists."""
    import re
    import subprocess
    import sys

    root = PACKAGE.parent
    done = subprocess.run([sys.executable, "scripts/architecture.py", "--check"], cwd=root,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = (root / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", text))
    assert len(named) > 20
    files = {p.name for p in PACKAGE.rglob("*.py")}
    missing = [n for n in named if not any((base / n).exists() for base in (
        PACKAGE, root, root / "scripts")) and ("/" in n or n not in files)]
    assert missing == []


def test_the_graph_sees_imports_inside_functions():
    """The real graph holds edges that only function-level imports make (the CLI's lazy ones),
    and the one path's edges: simulate -> data_parallel, never the reverse."""
    # cli imports simulate only inside _simulate (it starts without the model loaded)
    assert "hisparse_model.answers.simulate" in GRAPH["hisparse_model.cli"]
    assert "hisparse_model.schedule.data_parallel" in GRAPH["hisparse_model.answers.simulate"]
    assert "hisparse_model.answers.simulate" not in GRAPH["hisparse_model.schedule.data_parallel"]


def _planted_layer(module: str) -> int:
    """layer_of for the synthetic package "pkg" (its folders named as the real layers)."""
    return layer_of("hisparse_model" + module[len("pkg"):])


# name -> (files of a synthetic package "pkg", circles expected, upward imports expected)
PLANTED = {
    "function-level circle": (
        {"a.py": "from . import b\n", "b.py": "def f():\n    from .a import x\n"},
        [["pkg.a", "pkg.b"]], []),
    "three-module circle through 'from . import'": (
        {"a.py": "from .b import y\n", "b.py": "from . import c\n",
         "c.py": "import pkg.a\n"},
        [["pkg.a", "pkg.b", "pkg.c"]], []),
    "the model imports the text layer inside a function": (
        {"model/__init__.py": "", "model/plan.py": "def f():\n    from ..text.report import g\n",
         "text/__init__.py": "", "text/report.py": "x = 1\n"},
        [], [("pkg.model.plan", "pkg.text.report")]),
    "a subpackage importing up two levels into views": (
        {"engine/__init__.py": "", "engine/live.py": "from ..views import page\n",
         "views/__init__.py": "", "views/page.py": ""},
        [], [("pkg.engine.live", "pkg.views.page")]),
    "a layer importing the entry points": (
        {"answers/__init__.py": "", "answers/simulate.py": "from .. import cli\n",
         "cli.py": ""},
        [], [("pkg.answers.simulate", "pkg.cli")]),
    "downward only": (
        {"text/__init__.py": "", "text/report.py": "from ..answers.simulate import s\n",
         "answers/__init__.py": "", "answers/simulate.py": "from ..model.plan import p\n",
         "model/__init__.py": "", "model/plan.py": "import os\n"},
        [], []),
}


@pytest.mark.parametrize("name", PLANTED)
def test_the_checks_catch_a_planted_circle_or_upward_import(tmp_path, name):
    """On a synthetic package the graph finds exactly the circle or upward import planted."""
    files, want_circles, want_upward = PLANTED[name]
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    graph = import_graph(root)
    assert circles(graph) == want_circles
    assert upward(graph, _planted_layer) == want_upward


def test_one_rank_and_n_ranks_are_one_schedule_type():
    """simulate returns the same Schedule and step record for data_parallel_size 1 and 2."""
    work = Workload.from_json([{"prompt_len": 2}, {"prompt_len": 3}])
    one, two = simulate(Knobs(max_num_seqs=4), work), simulate(
        Knobs(max_num_seqs=4, data_parallel_size=2), work)
    assert type(one) is type(two)
    assert type(one.steps[0]) is type(two.steps[0])
    assert type(one.steps[0].ranks[0]) is type(two.steps[0].ranks[0])
    # one rank: one record per step; two: one per rank (each request on its own rank)
    assert [len(s.ranks) for s in one.steps] == [1] * len(one.steps)
    assert [len(s.ranks) for s in two.steps] == [2] * len(two.steps)


def test_a_step_of_several_ranks_is_read_through_its_ranks():
    """A one-rank step reads as its rank; a step of two ranks has no one rank's fields."""
    work = Workload.from_json([{"prompt_len": 2}, {"prompt_len": 3}])
    one = simulate(Knobs(max_num_seqs=4), work).steps[0]
    two = simulate(Knobs(max_num_seqs=4, data_parallel_size=2), work).steps[0]
    # S = 4, one rank: step 0 prefills both prompts, 2 + 3 = 5 tokens, requests 0 and 1
    assert (one.scheduled, one.num_tokens) == ({0: 2, 1: 3}, 5) == (
        one.ranks[0].scheduled, one.ranks[0].num_tokens)
    # two ranks: request 0 on rank 0, request 1 on rank 1 (the split of 2 over 2)
    assert [r.scheduled for r in two.ranks] == [{0: 2}, {1: 3}]
    with pytest.raises(AttributeError, match=r"StepResult.scheduled: 2 ranks; read .ranks"):
        two.scheduled  # noqa: B018 - the read is the test
