"""The package's layers import downward only: no import circle, and no model module imports the
text layer (report, cli, views, chart_*, app, bench); imports inside functions count too.

The graph is built from the source with ``ast``: every ``import`` / ``from ... import``
statement anywhere in a module (module level, inside functions, under ``if``) is an edge to
the package's module it names (``from . import x`` names the submodule ``x`` when there is
one).  A circle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from hisparse_model.knobs import Knobs
from hisparse_model.simulate import simulate
from hisparse_model.workload import Workload

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "hisparse_model"
# the text layer: formats what the model returns; the model never imports it
TEXT_LAYER = ("report", "cli", "cli_args", "views", "chart_data", "chart_keys", "chart_traffic", "app",
              "bench", "__main__")


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its source)."""
    files = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in files else mod
                           for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in files and t != name}
        graph[name] = edges
    return graph


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


def is_text(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in TEXT_LAYER


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(model module, text-layer module it imports); the package's ``__init__`` is neither."""
    return sorted((m, t) for m, targets in graph.items() for t in targets
                  if "." in m and not is_text(m) and is_text(t))


GRAPH = import_graph(PACKAGE)


def test_no_import_circle():
    """No module of hisparse_model/ (engine/ included) reaches itself through its imports."""
    assert circles(GRAPH) == []


def test_the_model_never_imports_the_text_layer():
    """Model modules (simulate, data_parallel, predict, engine, ...) import no text module."""
    assert upward(GRAPH) == []


def test_the_graph_sees_imports_inside_functions():
    """The real graph holds edges that only function-level imports make (the CLI's lazy ones),
    and the one path's edges: simulate -> data_parallel, never the reverse."""
    # cli imports simulate only inside _simulate (it starts without the model loaded)
    assert "hisparse_model.simulate" in GRAPH["hisparse_model.cli"]
    assert "hisparse_model.data_parallel" in GRAPH["hisparse_model.simulate"]
    assert "hisparse_model.simulate" not in GRAPH["hisparse_model.data_parallel"]


# name -> (files of a synthetic package "pkg", circles expected, upward imports expected)
PLANTED = {
    "function-level circle": (
        {"a.py": "from . import b\n", "b.py": "def f():\n    from .a import x\n"},
        [["pkg.a", "pkg.b"]], []),
    "three-module circle through 'from . import'": (
        {"a.py": "from .b import y\n", "b.py": "from . import c\n",
         "c.py": "import pkg.a\n"},
        [["pkg.a", "pkg.b", "pkg.c"]], []),
    "model imports the text layer inside a function": (
        {"simulate.py": "def f():\n    from .report import g\n", "report.py": "x = 1\n"},
        [], [("pkg.simulate", "pkg.report")]),
    "subpackage importing up two levels into views": (
        {"engine/__init__.py": "", "engine/live.py": "from ..views import page\n",
         "views/__init__.py": "", "views/page.py": ""},
        [], [("pkg.engine.live", "pkg.views.page")]),
    "downward only": (
        {"report.py": "from .simulate import s\n", "simulate.py": "from .plan import p\n",
         "plan.py": "import os\n"},
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
    assert upward(graph) == want_upward


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
