"""A new vLLM release, reviewed in a day: where every line the model cites went, and what the
cross-checks say of it.

    python scripts/vllm_release_check.py VERSION [--from OLD] [--out FILE.md] [--no-crosscheck]
                                         [--recordings DIR]

1. Installs ``vllm==VERSION`` CPU-only into ``.vllm/VERSION`` (``scripts/install_vllm_cpu.sh``,
   as the cross-checks do; nothing goes into the environment).
2. Takes every citation the code makes of ``OLD`` (default: the newest version the model
   covers): the ``VersionRules`` table (``hisparse_model/model/versions.py``) and each textual
   ``vllm/<path>:<lines>@OLD `name` `` in the package and the README.  For each it looks for the
   cited text in VERSION's file and says one of

   * **same**: the text is at the same lines;
   * **moved**: the text is in the file at other lines (the new lines given);
   * **changed**: the file is there but the text is not; the old lines and what VERSION has
     at those lines are shown, for a reader to find the new code;
   * **gone**: the file is not in VERSION.

3. Runs every CPU cross-check driver against VERSION and lists the tests that disagree:
   ``HISPARSE_EXTRA_VLLM=VERSION pytest -m vllm_cpu``, where VERSION is a *candidate* that
   the model answers for with the newest covered version's rules (``versions.candidate``)
   and the tests keep only their VERSION cases (``tests/conftest.py``).  What passes is
   where VERSION behaves as OLD does, shown by VERSION's own code.

4. With ``--recordings DIR``: compares each H200 recording of VERSION in DIR (``hisparse live``
   on the real engine) with the candidate model, row by row, as the recordings tests do, and
   lists what differs.

It prints the report as Markdown (``--out FILE`` writes it too: docs/releases/VERSION.md) and
exits 0 when every citation is found (same or moved) and every cross-check passed, 1 when
something needs a reader, 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TEXT_CITE = re.compile(r"vllm/(?P<path>[\w/]+\.py):(?P<start>\d+)(?:-(?P<end>\d+))?"
                       r"@(?P<version>\d+\.\d+\.\d+)\s+`(?P<name>[^`]+)`")
VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")  # ASCII digits: a full-width "0.35.0" is no release


@dataclasses.dataclass(frozen=True)
class Cited:
    """One citation of the old version: where the code makes it and what it names."""

    where: str  # "hisparse_model/model/versions.py: q" or "hisparse_model/schedule/scheduler.py:154"
    path: str  # inside the vllm package
    start: int
    end: int
    name: str


@dataclasses.dataclass(frozen=True)
class Found:
    cited: Cited
    status: str  # same, moved, changed, gone
    start: int = 0  # the new lines (same, moved)
    end: int = 0
    old_text: str = ""  # changed: the old lines and the new file's text at them
    new_text: str = ""


def _norm(text: str) -> str:
    return " ".join(text.split())


def citations(old: str) -> list[Cited]:
    """Every citation of ``old``: the VersionRules table, then the textual ones."""
    from hisparse_model.model.versions import RULES

    out, seen = [], set()
    for rules in RULES.values():
        if rules.vllm_version != old:
            continue
        for key, c in rules.cites.items():
            if (key, c) not in seen:
                seen.add((key, c))
                out.append(Cited(f"hisparse_model/model/versions.py: {key}", c.path, c.start, c.end,
                                 c.symbol))
    files = (sorted((REPO / "hisparse_model").rglob("*.py")) + [REPO / "README.md"]
             + sorted((REPO / "docs").rglob("*.md")))
    for f in files:
        text = f.read_text()
        for m in TEXT_CITE.finditer(text):
            if m["version"] != old:
                continue
            line = text.count("\n", 0, m.start()) + 1
            start = int(m["start"])
            out.append(Cited(f"{f.relative_to(REPO)}:{line}", m["path"], start,
                             int(m["end"] or start), m["name"]))
    return out


def locate(cited: Cited, old_root: pathlib.Path, new_root: pathlib.Path) -> Found:
    """Where ``cited``'s text is in the new version's file."""
    new_file = new_root / "vllm" / cited.path
    if not new_file.is_file():
        return Found(cited, "gone")
    lines = new_file.read_text().splitlines()
    span = cited.end - cited.start + 1
    name = _norm(cited.name)

    def holds(start: int) -> bool:
        return name in _norm(" ".join(lines[start - 1:start - 1 + span]))

    if cited.start + span - 1 <= len(lines) and holds(cited.start):
        return Found(cited, "same", cited.start, cited.end)
    # the nearest window of the same length that holds the text (a moved function)
    hits = [s for s in range(1, len(lines) - span + 2) if holds(s)]
    if hits:
        best = min(hits, key=lambda s: abs(s - cited.start))
        return Found(cited, "moved", best, best + span - 1)
    old_file = old_root / "vllm" / cited.path
    old = old_file.read_text().splitlines() if old_file.is_file() else []
    return Found(cited, "changed", old_text="\n".join(old[cited.start - 1:cited.end]),
                 new_text="\n".join(lines[cited.start - 1:cited.end]))


def report(new: str, old: str, found: list[Found], crosscheck: dict | None) -> str:
    counts = {s: sum(f.status == s for f in found) for s in ("same", "moved", "changed", "gone")}
    out = [f"# vLLM {new} against {old}: the model's citations and cross-checks", "",
           f"Made by `python scripts/vllm_release_check.py {new} --from {old}` on "
           f"{time.strftime('%Y-%m-%d')}. {len(found)} citations of {old}: "
           + ", ".join(f"{n} {s}" for s, n in counts.items()) + ".", "",
           "| status | cited from | vllm/ file | old lines | new lines | text |",
           "|---|---|---|---|---|---|"]
    order = {"gone": 0, "changed": 1, "moved": 2, "same": 3}
    for f in sorted(found, key=lambda f: (order[f.status], f.cited.path, f.cited.start)):
        c = f.cited
        new_lines = f"{f.start}-{f.end}" if f.status in ("same", "moved") else "—"
        out.append(f"| {f.status} | `{c.where}` | `{c.path}` | {c.start}-{c.end} | {new_lines} "
                   f"| `{c.name.replace('|', '/')}` |")
    changed = [f for f in found if f.status == "changed"]
    if changed:
        out += ["", "## Changed: the old text, and the new file at the same lines", ""]
        for f in changed:
            out += [f"### `{f.cited.path}:{f.cited.start}-{f.cited.end}` `{f.cited.name}` "
                    f"(cited from `{f.cited.where}`)", "", "old:", "```python", f.old_text,
                    "```", "new, same lines:", "```python", f.new_text, "```", ""]
    if crosscheck is not None:
        out += ["", "## CPU cross-checks against the new version", "",
                f"`{crosscheck['command']}`: exit {crosscheck['status']}, "
                f"{crosscheck['summary']}", ""]
        out += [f"- disagrees: `{t.split(': ', 1)[0]}`: {t.split(': ', 1)[-1]}"
                for t in crosscheck["failed"]] or [
            "Every cross-check driver agrees with the model."]
    return "\n".join(out) + "\n"


def read_junit(path: pathlib.Path):
    """A JUnit file's root element, read through the input boundary (bounded as a
    recording); ValueError in one line where it is no pytest JUnit file."""
    import xml.etree.ElementTree as ET

    from hisparse_model.boundary.files import read_bytes
    from hisparse_model.boundary.limits import RECORDING

    data = read_bytes(str(path), RECORDING, f"--crosscheck-junit {path}")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise ValueError(f"--crosscheck-junit {path}: not XML ({exc})") from None
    if next(root.iter("testsuite"), None) is None:
        raise ValueError(f"--crosscheck-junit {path}: no <testsuite> (a pytest --junitxml "
                         "file)")
    return root


def failures(junit: pathlib.Path, root=None) -> list[str]:
    """``test id: the first line pytest gave for its failure`` for each failing test."""
    root = read_junit(junit) if root is None else root
    out = []
    for case in root.iter("testcase"):
        for bad in case:
            if bad.tag in ("failure", "error"):
                said = [ln[1:].strip() for ln in (bad.text or "").splitlines()
                        if ln.startswith("E ") and ln[1:].strip()]
                reason = next((ln for ln in said if "Error" in ln or "disagree" in ln),
                              said[0] if said else bad.get("message", ""))
                name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
                out.append(f"{name}: {reason[:300]}")
    return out


def run_crosschecks(new: str) -> dict:
    """``pytest -m vllm_cpu`` with NEW the candidate (its cases only); its failures."""
    junit = REPO / "test-artifacts" / f"junit-release-{new}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "vllm_cpu", "-n", "2", "--dist",
           "loadgroup", "-p", "no:cacheprovider", "-rfE", f"--junitxml={junit}"]
    env = dict(os.environ, HISPARSE_EXTRA_VLLM=new)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    failed = failures(junit) if junit.is_file() else []
    return {"command": f"HISPARSE_EXTRA_VLLM={new} " + " ".join(["pytest", *cmd[3:-1]]),
            "status": done.returncode,
            "summary": lines[-1].strip("= ") if lines else "no output", "failed": failed}


def compare_recordings(directory: str) -> list[tuple[str, list[str]]]:
    """(name, differences) for every recording in ``directory``, the model answering for
    its version as a candidate (run with ``HISPARSE_EXTRA_VLLM`` set)."""
    import glob

    from hisparse_model.recorded.recordings import compare_recording, load
    from hisparse_model.recorded.workload_recordings import compare_workload_recording

    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        name = os.path.basename(path)[:-5]
        rec = load(path)
        compare = compare_workload_recording if "workload" in rec else compare_recording
        out.append((name, compare(rec)))
    return out


def recordings_section(found: list[tuple[str, list[str]]]) -> str:
    same = sum(not d for _, d in found)
    lines = ["", "## H200 recordings against the candidate model", "",
             f"{len(found)} recordings, {same} equal to the model on every field.", ""]
    for name, diffs in found:
        lines.append(f"- `{name}`: " + ("equal on every field" if not diffs else
                                        "; ".join(d.replace("|", "/") for d in diffs[:3])
                                        + (f" (and {len(diffs) - 3} more)" if len(diffs) > 3
                                           else "")))
    return "\n".join(lines) + "\n"


def check_arguments(args, covered) -> object:
    """ValueError (one line) for an argument this check cannot use, before it installs
    anything; the --crosscheck-junit file's root element (None without one)."""
    for v in (args.version, args.old):
        if not VERSION.fullmatch(v):  # fullmatch: "0.34.0\n" is no release
            raise ValueError(f"{v!r} is not a release (X.Y.Z)")
    if args.old not in covered:
        raise ValueError(f"--from {args.old}: the model covers {', '.join(covered)}")
    if args.recordings is not None:
        if not os.path.isdir(args.recordings):
            raise ValueError(f"--recordings {args.recordings}: not a folder")
        if not any(name.endswith(".json") for name in os.listdir(args.recordings)):
            raise ValueError(f"--recordings {args.recordings}: no recording (*.json) in it")
    if args.out is not None and (os.path.isdir(args.out) or not args.out.strip()):
        raise ValueError(f"--out {args.out!r}: give a file name (docs/releases/VERSION.md)")
    if args.crosscheck_junit is None:
        return None
    if not os.path.exists(args.crosscheck_junit):
        raise ValueError(f"--crosscheck-junit {args.crosscheck_junit}: no such file")
    return read_junit(pathlib.Path(args.crosscheck_junit))


def main(argv: list[str] | None = None) -> int:
    from hisparse_model import VLLM_VERSIONS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("version")
    ap.add_argument("--from", dest="old", default=VLLM_VERSIONS[-1],
                    help=f"the covered version to compare against (default {VLLM_VERSIONS[-1]})")
    ap.add_argument("--out", metavar="FILE.md")
    ap.add_argument("--no-crosscheck", action="store_true", help="the citations only")
    ap.add_argument("--recordings", metavar="DIR", help="H200 recordings of VERSION to compare")
    ap.add_argument("--crosscheck-junit", metavar="FILE.xml",
                    help="report the cross-checks of an earlier run of this check (its JUnit "
                    "file, test-artifacts/junit-release-VERSION.xml) instead of running them")
    args = ap.parse_args(argv)
    try:  # every argument checked before anything is installed or built
        junit = check_arguments(args, VLLM_VERSIONS)
    except ValueError as exc:
        print(f"vllm_release_check: error: {exc}", file=sys.stderr)
        return 2
    root = pathlib.Path(os.environ.get("VLLM_TARGET_ROOT", REPO / ".vllm"))
    install = subprocess.run(["bash", str(REPO / "scripts" / "install_vllm_cpu.sh"), args.old,
                              args.version], env=dict(os.environ, PYTHON=sys.executable))
    if install.returncode:
        print(f"vllm_release_check: error: vllm=={args.version} could not be installed "
              f"(scripts/install_vllm_cpu.sh exit {install.returncode})", file=sys.stderr)
        return 2
    found = [locate(c, root / args.old, root / args.version) for c in citations(args.old)]
    if args.crosscheck_junit:
        suite = next(junit.iter("testsuite"))
        bad = failures(pathlib.Path(args.crosscheck_junit), junit)
        cross = {"command": f"HISPARSE_EXTRA_VLLM={args.version} pytest -m vllm_cpu (its "
                            f"JUnit file, {suite.get('timestamp', '')[:16]})",
                 "status": 1 if bad else 0,
                 "summary": f"{len(bad)} of {suite.get('tests')} tests disagree",
                 "failed": bad}
    else:
        cross = None if args.no_crosscheck else run_crosschecks(args.version)
    text = report(args.version, args.old, found, cross)
    recs = None
    if args.recordings:  # in a child: the model must see VERSION as the candidate
        code = ("import sys; sys.path.insert(0, 'scripts'); import vllm_release_check as r, "
                f"json; print(json.dumps(r.compare_recordings({args.recordings!r})))")
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                              text=True, env=dict(os.environ, HISPARSE_EXTRA_VLLM=args.version))
        if done.returncode:
            print(f"vllm_release_check: error: --recordings {args.recordings}: "
                  f"{(done.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
            return 2
        recs = json.loads(done.stdout)
        text += recordings_section(recs)
    print(text, end="")
    if args.out:
        pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.out).write_text(text)
    clean = all(f.status in ("same", "moved") for f in found) and (
        cross is None or cross["status"] == 0) and not any(d for _, d in recs or [])
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
