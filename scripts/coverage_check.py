"""Per-module coverage of the model after ``coverage run -m pytest``: print it, fail under the bar.

    coverage run -m pytest; python scripts/coverage_check.py   (scripts/run_tests.py runs both)

``coverage run`` (``[tool.coverage.run]`` in pyproject.toml) measures the pytest
process and, through ``patch = ["subprocess"]``, every Python process it starts:
the pytest-xdist workers, the command line, the notebook kernels, the app (the
cross-check servers of vLLM's code are left unmeasured: ``crosscheck/client.py``).  This
script combines their data files, prints the report of the whole package, then
the modules held to the bar -- the model core (``hisparse_model/*.py``) and the
dashboards (``hisparse_model/views/``) -- and exits 1 if one is under
:data:`BAR` percent.  ``engine/`` (the live engine, on a GPU) and ``crosscheck/``
(the drivers of vLLM's code on CPU; what of them the tests' own process runs) are
reported, not held to it.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
BAR = 90.0  # percent of statements, per module
NOT_HELD = ("hisparse_model/engine/", "hisparse_model/crosscheck/")


def held(path: str) -> bool:
    """Whether a measured file is held to the bar (the model core and views/)."""
    return path.startswith("hisparse_model/") and not path.startswith(NOT_HELD)


def main() -> int:
    coverage = [sys.executable, "-m", "coverage"]
    # data files of every process, one each: combine them (a re-run finds one file, fine)
    subprocess.run([*coverage, "combine", "-q"], cwd=REPO)
    if subprocess.run([*coverage, "report"], cwd=REPO).returncode != 0:
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "coverage.json"
        subprocess.run([*coverage, "json", "-q", "-o", str(out)], cwd=REPO, check=True)
        files = json.loads(out.read_text())["files"]
    # every module of the model, measured or not (a module no test imports is 0 %)
    paths = sorted(str(p.relative_to(REPO)) for p in (REPO / "hisparse_model").rglob("*.py"))
    short = []
    print(f"\nmodel core and views/, held to {BAR:.0f} %:")
    for path in filter(held, paths):
        summary = files.get(path, {}).get("summary")
        if summary is None:
            pct, what = 0.0, "not measured"
        elif summary["num_statements"] == 0:
            continue  # nothing to run (e.g. an empty __init__)
        else:
            pct = summary["percent_covered"]
            what = f"{summary['covered_lines']}/{summary['num_statements']}"
        mark = "" if pct >= BAR else f"   UNDER by {BAR - pct:.1f}"
        print(f"  {path:<45} {pct:6.1f} %  {what}{mark}")
        if pct < BAR:
            short.append(f"{path} {pct:.1f} %")
    if short:
        print(f"under {BAR:.0f} %: " + "; ".join(short), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
