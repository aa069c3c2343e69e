"""The README and the documentation site say what the code does: the site builds in strict
mode, every command they show runs with the exit status and the lines shown, and every
``--help`` names its page."""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from hisparse_model.cli_args import DOC_PAGES, build_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
COMMAND = re.compile(r"^(hisparse|python3? -m hisparse_model)\b")


def _blocks(kind: str):
    for page in PAGES:
        for lang, body in FENCE.findall(page.read_text()):
            if lang == kind:
                yield page.relative_to(ROOT).as_posix(), body


def console_examples():
    """``(page, command, shown lines, exit status)`` of every ``console`` block: ``$ CMD``, the
    lines it prints, then ``$ echo $?`` and the status."""
    out = []
    for page, body in _blocks("console"):
        lines = body.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            assert line.startswith("$ ") and line != "$ echo $?", (page, line)
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ "):
                j += 1
            assert lines[j:j + 2][:1] == ["$ echo $?"], f"{page}: {line[:60]} has no $ echo $?"
            out.append((page, line[2:], lines[i + 1:j], int(lines[j + 1])))
            i = j + 2
    return out


EXAMPLES = console_examples()


def _run(command: str, cwd) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    if argv[0] == "hisparse":
        argv = [sys.executable, "-m", "hisparse_model", *argv[1:]]
    else:  # python -m hisparse_model...
        argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "100"})


def _shown_in(shown: list[str], printed: list[str]) -> str | None:
    """None when each shown line is a printed line, in order (``...`` skips lines; a line
    ending in `` ...`` is a printed line's beginning), else the first that is not."""
    k = 0
    for line in shown:
        if line == "...":
            continue
        prefix = line[:-4] if line.endswith(" ...") else None
        while k < len(printed) and not (printed[k].startswith(prefix) if prefix is not None
                                        else printed[k] == line):
            k += 1
        if k == len(printed):
            return line
        k += 1
    return None


def test_the_readme_and_the_site_show_commands():
    """The three README examples and the host-pool page's are among the commands run."""
    pages = {page for page, *_ in EXAMPLES}
    assert {"README.md", "docs/host-pool.md"} <= pages
    assert sum(page == "README.md" for page, *_ in EXAMPLES) == 3


@pytest.mark.parametrize("page,command,shown,status", EXAMPLES,
                         ids=[f"{p}:{c[:50]}" for p, c, _, _ in EXAMPLES])
def test_each_command_shown_prints_what_is_shown(page, command, shown, status):
    """Run as shown from the repository's root, a command exits with the status shown and
    prints every line shown, in order (stdout, then stderr)."""
    done = _run(command, ROOT)
    assert done.returncode == status, (done.returncode, done.stderr[-500:])
    missing = _shown_in(shown, done.stdout.splitlines() + done.stderr.splitlines())
    assert missing is None, f"{page}: not printed: {missing!r}"


def _bash_commands():
    for page, body in _blocks("bash"):
        joined = body.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            if COMMAND.match(line):
                yield page, line


BASH = list(_bash_commands())


@pytest.mark.parametrize("page,command", BASH, ids=[f"{p}:{c[:50]}" for p, c in BASH])
def test_each_command_in_a_bash_block_is_one_the_cli_takes(page, command, tmp_path):
    """A command shown in a ``bash`` block (a GPU machine's, mostly) is not bad input: it
    exits with anything but 2 here (``live`` without a GPU: 3), run in an empty folder."""
    done = _run(command.replace("$OUT/", ""), tmp_path)
    assert done.returncode != 2, f"{page}: {command}: {done.stderr.strip()[-300:]}"


def test_no_command_is_shown_unrun():
    """``hisparse`` commands appear only in blocks these tests run (``console``, ``bash``):
    a ``text`` block holding one is a synopsis with placeholders, said as such above it."""
    for page, body in _blocks("text"):
        for line in body.splitlines():
            if COMMAND.match(line.strip()):
                text = (ROOT / page).read_text()
                at = text.index(body)
                assert "synopsis" in text[max(0, at - 400):at].lower(), (page, line)


def test_every_help_names_its_page_and_the_page_is_in_the_site():
    """``hisparse --help`` and each subcommand's help end with their page, which exists and
    is in mkdocs.yml's navigation."""
    nav = (ROOT / "mkdocs.yml").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and "check" in a.choices)
    helps = {"hisparse": parser.format_help(),
             **{name: p.format_help() for name, p in sub.choices.items()}}
    assert set(helps) == set(DOC_PAGES)
    for name, text in helps.items():
        page = DOC_PAGES[name]
        assert page in " ".join(text.split()), name
        assert (ROOT / page).is_file() and page.removeprefix("docs/") in nav, page


def _build(root: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess:
    """mkdocs build --strict (not -q: it hides the warnings strict mode fails on)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(site)], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_in_strict_mode(tmp_path):
    """mkdocs (Material theme) builds docs/ with warnings as errors."""
    done = _build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "site" / "host-pool" / "index.html").is_file()


# (what is broken in a copy of the site, what the strict build says)
BROKEN = [
    ("a link to a page that is not there", "[the page](missing.md)", "missing.md"),
    ("a link to an anchor that is not there", "[the pool](host-pool.md#no-such-part)",
     "no-such-part"),
    ("a page left out of the navigation", None, "stray.md"),
]


@pytest.mark.parametrize("what,link,named", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_site_fails_the_strict_build(tmp_path, what, link, named):
    """The strict build is a check that can fail: each kind of break fails it, named."""
    import shutil

    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    if link is None:
        (tmp_path / "docs" / "stray.md").write_text("# A page no one links\n")
    else:
        with open(tmp_path / "docs" / "index.md", "a") as f:
            f.write(f"\nSee {link}.\n")
    done = _build(tmp_path, tmp_path / "site")
    assert done.returncode != 0 and named in done.stderr, done.stderr[-1000:]


def test_the_measurements_page_is_what_the_logs_say():
    """docs/measurements.md is written from the committed logs (scripts/measurements.py)."""
    done = subprocess.run([sys.executable, "scripts/measurements.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_readme_is_short():
    """A newcomer reads the README in two minutes: at most about 150 lines, no dated
    measurement (those are on docs/measurements.md)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)
