"""Draw docs/ARCHITECTURE.md's picture of the layers from the code, so it cannot drift.

    python scripts/architecture.py          # rewrite the picture in docs/ARCHITECTURE.md
    python scripts/architecture.py --check  # exit 1 if the committed picture is not today's

The picture is a Mermaid flowchart (GitHub draws it): one box per layer of
``hisparse_model/layers.py``, bottom to top, listing its modules, and one arrow per pair of
layers that import each other, labelled with how many imports, read from the source
(``layers.import_graph``: imports inside functions count).  It replaces the text between
the two marker lines of docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hisparse_model.layers import LAYERS, NAMES, import_graph, layer_of  # noqa: E402

PACKAGES = set(NAMES) - {""}
DOC = ROOT / "docs" / "ARCHITECTURE.md"
BEGIN = "<!-- the picture: drawn by scripts/architecture.py from the code; do not edit -->"
END = "<!-- end of the picture -->"


def picture(root: pathlib.Path = ROOT / "hisparse_model") -> str:
    """The Mermaid block: layers top to bottom with their modules, arrows with import counts."""
    graph = import_graph(root)
    members: dict[int, list[str]] = {}
    for module in sorted(graph):
        leaf = module.split(".")[-1]
        if module.count(".") == 0 or (module.count(".") == 1 and leaf in PACKAGES):
            continue  # the package itself, a layer's own __init__
        members.setdefault(layer_of(module), []).append(leaf)
    edges = Counter((layer_of(m), layer_of(t)) for m, ts in graph.items() for t in ts
                    if layer_of(m) != layer_of(t))
    lines = ["```mermaid", "flowchart TB"]
    for i in reversed(range(len(LAYERS))):
        name, what = LAYERS[i]
        title = f"hisparse_model/{name}/" if name else "hisparse_model/ (top)"
        mods = ", ".join(members.get(i, [])) or "-"
        lines.append(f'  L{i}["<b>{title}</b><br/>{what}<br/><i>{mods}</i>"]')
    for (a, b), n in sorted(edges.items(), key=lambda e: (-e[0][0], -e[0][1])):
        lines.append(f"  L{a} -->|{n}| L{b}")
    lines.append("```")
    return "\n".join(lines)


def rewritten(text: str) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{picture()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    new = rewritten(text)
    if "--check" in argv:
        if new != text:
            print("docs/ARCHITECTURE.md: the picture is not today's; run "
                  "python scripts/architecture.py", file=sys.stderr)
            return 1
        return 0
    tmp = f"{DOC}.tmp{os.getpid()}"
    pathlib.Path(tmp).write_text(new)
    os.replace(tmp, DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
