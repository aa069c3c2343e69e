"""Citations cannot rot: every vLLM ``file:line`` the package cites holds the name it cites.

A citation is written ``vllm/<path>:<line>[-<line>][@<version>] `<name>` `` (the
version defaults to 0.31.0); ``VersionRules.cites`` holds every version's as data.
This test opens each one in the installed sources (``.vllm/<version>``, put
there by ``scripts/install_vllm_cpu.sh``) and checks that the lines exist and
that ``<name>`` appears within them.  A ``vllm/...py:<line>`` written any other
way fails too, so no citation escapes the check.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from hisparse_model.model.versions import COVERED, RULES

pytestmark = pytest.mark.vllm_cpu

REPO = pathlib.Path(__file__).resolve().parents[1]
ANY = re.compile(r"vllm/[\w/]+\.py:\d+")
FULL = re.compile(r"vllm/(?P<path>[\w/]+\.py):(?P<start>\d+)(?:-(?P<end>\d+))?"
                  r"(?:@(?P<version>0\.3\d\.0))?\s+`(?P<name>[^`]+)`")
DEFAULT_VERSION = "0.31.0"


def _sources() -> list[pathlib.Path]:
    files = (sorted((REPO / "hisparse_model").rglob("*.py")) + [REPO / "README.md"]
             + sorted((REPO / "docs").rglob("*.md")))
    return [f for f in files if f.exists()]


def _text_cites():
    for f in _sources():
        text = f.read_text()
        full = list(FULL.finditer(text))
        covered = {m.start() for m in full}
        for m in ANY.finditer(text):
            if m.start() not in covered:
                line = text.count("\n", 0, m.start()) + 1
                yield f, line, None
        for m in full:
            line = text.count("\n", 0, m.start()) + 1
            start = int(m["start"])
            yield f, line, (m["version"] or DEFAULT_VERSION, m["path"], start,
                            int(m["end"] or start), m["name"])


def _check(version, path, start, end, name, vllm_root) -> str | None:
    src = vllm_root / version / "vllm" / path
    if not src.exists():
        return f"vllm/{path} does not exist in {version}"
    lines = src.read_text().splitlines()
    if not 1 <= start <= end <= len(lines):
        return f"vllm/{path}:{start}-{end} is outside the file ({len(lines)} lines) in {version}"
    window = " ".join(" ".join(lines[start - 1:end]).split())
    if " ".join(name.split()) not in window:
        return f"vllm/{path}:{start}-{end} in {version} does not hold `{name}`"
    return None


def test_every_citation_in_the_package_holds_its_name(vllm_sources):
    """Each textual citation names a range that exists and contains the cited name."""
    bad, n = [], 0
    for f, line, cite in _text_cites():
        n += 1
        where = f"{f.relative_to(REPO)}:{line}"
        if cite is None:
            bad.append(f"{where}: citation without a `name` (write vllm/<path>:<lines> `name`)")
            continue
        problem = _check(*cite, vllm_sources)
        if problem:
            bad.append(f"{where}: {problem}")
    assert n >= 20
    assert not bad, "\n".join(bad)


def test_every_version_rule_citation_holds_its_name(vllm_sources):
    """Each VersionRules citation, in each version's own sources, holds its name."""
    cites = {(r.vllm_version, c) for r in RULES.values() for c in r.cites.values()}
    assert {v for v, _ in cites} == set(COVERED)
    bad = [p for v, c in sorted(cites)
           if (p := _check(v, c.path, c.start, c.end, c.symbol, vllm_sources))]
    assert not bad, "\n".join(bad)
