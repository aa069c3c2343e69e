"""The package's layers, bottom to top: each may import only the layers below it (and itself).

Declared once here; ``tests/test_import_graph.py`` checks every import against it and
``scripts/architecture.py`` draws docs/ARCHITECTURE.md's picture from it and from the imports.
"""

from __future__ import annotations

import ast
import pathlib

LAYERS = (  # (subpackage, what it is for); "" is the package's top: its face and entry points
    ("boundary", "every file, stream, URL and number read: bounded, one-line refusals"),
    ("model", "one engine configuration: knobs to sizes, start-up batches, one batch's route"),
    ("schedule", "requests over engine steps: workloads, vLLM's scheduler, serving, DP sync"),
    ("inputs", "what the user gives: commands, vLLM's flags, start-up logs, traces, a server"),
    ("answers", "the questions answered: predict, simulate, exposure, advice, traffic risk"),
    ("text", "the answers as text and as the data the charts draw"),
    ("recorded", "recordings of real engine runs, compared with the model"),
    ("engine", "the real vLLM engine, driven and recorded (GPU only)"),
    ("crosscheck", "the model against vLLM's own code run on a CPU"),
    ("views", "what the notebooks and the app show: dashboards, charts, tables"),
    ("", "the entry points (cli, app, bench) and the package's face (__init__)"),
)
NAMES = tuple(name for name, _ in LAYERS)


def layer_of(module: str) -> int:
    """The layer (index into :data:`LAYERS`) of a module ``hisparse_model.<...>``."""
    parts = module.split(".")
    return NAMES.index(parts[1]) if len(parts) > 2 and parts[1] in NAMES else len(NAMES) - 1


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    """The dotted name of the module at ``path`` in the package rooted at ``root``."""
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
