"""Every file a command writes (``boundary/outputs.py``): refused before the work when it is
not a regular file or a new name, or is one of the command's inputs; written whole or not at
all; a full disk one line naming the flag, the old file left as it was.

Invariant: after a refusal or a failed write nothing at the path has changed, and no
temporary file is left in its folder.
"""

import errno
import pathlib
import os
import subprocess
import sys
import time

import pytest

from hisparse_model.boundary.outputs import OutputError, check_output, write_atomic


def _setup(tmp_path):
    (tmp_path / "old.svg").write_text("old")
    (tmp_path / "input.jsonl").write_text("{}")
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "old.svg", tmp_path / "link.svg")
    os.link(tmp_path / "input.jsonl", tmp_path / "hard.jsonl")  # the input by another name
    (tmp_path / "dir").mkdir()


@pytest.mark.parametrize("path, said", [
    ("new.svg", None),                      # a new name in an existing folder
    ("old.svg", None),                      # an existing regular file: replaced whole
    ("", "--plot '': give a file name"),
    ("fifo", "is a FIFO"),
    ("link.svg", "is a symbolic link"),     # a rename would replace the link, not its target
    ("dir", "is a folder; give a file name"),
    ("/dev/null", "is a character device"),
    ("hard.jsonl", "is the --traffic file"),  # same inode as the input, another name
    ("input.jsonl", "is the --traffic file"),
    ("missing/x.svg", "no folder"),
    # "-" is not standard output here: a file named "-" would be written (twice over, with
    # --plot - --crash-workload -, the second replacing the first)
    ("-", "--plot -: writes a file (standard output carries the answer)"),
])
def test_check_output(tmp_path, path, said):
    """Each row: accepted (None) or the one line's telling part."""
    _setup(tmp_path)
    full = path if path.startswith("/") or path in ("", "-") else str(tmp_path / path)
    if said is None:
        check_output("--plot", full, {"--traffic": str(tmp_path / "input.jsonl")})
        return
    with pytest.raises(OutputError) as got:
        check_output("--plot", full, {"--traffic": str(tmp_path / "input.jsonl")})
    assert said in str(got.value) and "\n" not in str(got.value)


def test_write_atomic_replaces_whole_and_a_full_disk_leaves_the_old_file(tmp_path, monkeypatch):
    """A write replaces the file whole; a disk that fills during the write is one line, the
    old file as it was, no temporary file left."""
    _setup(tmp_path)
    path = str(tmp_path / "old.svg")
    write_atomic("--plot", path, "new")
    assert open(path).read() == "new"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError) as got:
        write_atomic("--plot", path, "newer")
    assert str(got.value) == f"--plot {path}: the disk is full; nothing was written"
    assert open(path).read() == "new"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".hisparse-")]


# (the file's mode before, the umask) -> its mode after write_atomic: an existing file keeps
# its own (mkstemp made every output 0600); a new one gets 0666 less the umask
MODES = [
    (0o644, 0o022, 0o644),
    (0o664, 0o002, 0o664),
    (None, 0o022, 0o644),   # 0666 & ~0022
    (None, 0o077, 0o600),   # 0666 & ~0077
]


@pytest.mark.parametrize("before, umask, after", MODES)
def test_a_written_file_keeps_the_mode_a_plain_write_would_give(tmp_path, before, umask, after):
    """The rename keeps the temporary file's mode, so it is set to the replaced file's, or to
    what open(path, "w") gives a new one under the umask."""
    path = tmp_path / "out.svg"
    if before is not None:
        path.write_text("old")
        os.chmod(path, before)
    old = os.umask(umask)
    try:
        write_atomic("--plot", str(path), "new")
    finally:
        os.umask(old)
    assert (os.stat(path).st_mode & 0o777, path.read_text()) == (after, "new")


def _cli(*argv):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "hisparse_model", *argv], capture_output=True,
                          text=True, timeout=120)


# (command's arguments with {d} the test's folder) -> the one line's telling part: a model
# folder's config.json, and a file live writes beside its recording, are the command's files
SIDE = [
    (["simulate", "--max-num-seqs", "2", "--traffic", "{d}/tr.json", "--minutes", "1",
      "--model", "{d}/m", "--plot", "{d}/m/config.json"],
     "--plot {d}/m/config.json: is the --model file"),
    (["simulate", "--max-num-seqs", "2", "--traffic", "{d}/tr.json", "--minutes", "1",
      "--model", "{d}/m", "--crash-workload", "{d}/m/config.json"],
     "--crash-workload {d}/m/config.json: is the --model file"),
    (["live", "--max-num-seqs", "2", "--model", "{d}/m", "--out", "{d}/m/config.json"],
     "--out {d}/m/config.json: is the --model file"),
    # live writes its engine's console to OUT less .json plus .log
    (["live", "--max-num-seqs", "2", "--workload", "{d}/w.log", "--out", "{d}/w.json"],
     "--out's log {d}/w.log: is the --workload file"),
]


# (command's arguments, stdin redirected from {d}/FILE) -> the one line's telling part: an
# input given as standard input is the file it is redirected from
STDIN = [
    (["simulate", "--max-num-seqs", "2", "--traffic", "-", "--minutes", "1", "--seeds", "1",
      "--plot", "{d}/tr.json"], "tr.json", "--plot {d}/tr.json: is the --traffic file "
     "(standard input, redirected from it)"),
    (["live", "--max-num-seqs", "2", "--workload", "-", "--out", "{d}/w.log"], "w.log",
     "--out {d}/w.log: is the --workload file (standard input, redirected from it)"),
]


@pytest.mark.parametrize("argv, stdin, said", STDIN)
def test_no_output_replaces_the_file_standard_input_reads(tmp_path, argv, stdin, said):
    """``< FILE`` with ``-`` as the input and FILE as an output: refused in one line, exit
    2, before any work, and FILE is as it was."""
    (tmp_path / "tr.json").write_text('{"rate_per_s": 1, "prompt_len": 16, "max_tokens": 8}')
    (tmp_path / "w.log").write_text('{"requests": [{"prompt_len": 2}]}')
    before = (tmp_path / stdin).read_bytes()
    with open(tmp_path / stdin) as f:
        got = subprocess.run([sys.executable, "-m", "hisparse_model",
                              *[a.format(d=tmp_path) for a in argv]], stdin=f,
                             capture_output=True, text=True, timeout=120)
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr
    assert said.format(d=tmp_path) in got.stderr
    assert (tmp_path / stdin).read_bytes() == before


@pytest.mark.parametrize("argv, said", SIDE)
def test_no_output_replaces_a_model_config_or_an_input_beside_it(tmp_path, argv, said):
    """Refused in one line, exit 2, before any work, and the file is as it was."""
    (tmp_path / "m").mkdir()
    config = (tmp_path / "m" / "config.json")
    config.write_text((pathlib.Path(__file__).parent.parent / "hisparse_model" / "data"
                       / "dsv32-config.json").read_text())
    (tmp_path / "tr.json").write_text('{"rate_per_s": 1, "prompt_len": 16, "max_tokens": 8}')
    (tmp_path / "w.log").write_text('{"requests": [{"prompt_len": 2}]}')
    before = {p: p.read_bytes() for p in (config, tmp_path / "w.log")}
    got = _cli(*[a.format(d=tmp_path) for a in argv])
    assert got.returncode == 2 and got.stderr.count("\n") == 1
    assert said.format(d=tmp_path) in got.stderr
    assert {p: p.read_bytes() for p in before} == before


def test_outputs_are_written_all_or_none(tmp_path, monkeypatch):
    """write_all: a second output that fails leaves the first unwritten (the old file as it
    was, no temporary file); a SIGTERM arriving between the renames acts after the last, so
    both files are new when the command stops (before, 25 of 40 kills between the writes left
    --crash-workload written and --plot not)."""
    import signal

    from hisparse_model.boundary import outputs
    from hisparse_model.exits import Terminated, catch_ending_signals, restore

    a, b = tmp_path / "a.json", tmp_path / "b.svg"
    a.write_text("old a")
    with pytest.raises(OutputError, match="--plot .*: no folder"):
        outputs.write_all([("--crash-workload", str(a), "new a"),
                           ("--plot", str(tmp_path / "missing" / "b.svg"), "new b")])
    assert a.read_text() == "old a" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]

    real = os.replace
    calls = []

    def replace_then_terminate(src, dst):
        real(src, dst)
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # held back until the last rename

    monkeypatch.setattr(outputs.os, "replace", replace_then_terminate)
    handlers = catch_ending_signals()
    try:
        with pytest.raises(Terminated):
            outputs.write_all([("--crash-workload", str(a), "new a"), ("--plot", str(b), "new b")])
            time.sleep(1)  # (re-sent as the handlers come back: raised before this ends)
    finally:
        restore(handlers)
    assert (a.read_text(), b.read_text()) == ("new a", "new b") and len(calls) == 2
