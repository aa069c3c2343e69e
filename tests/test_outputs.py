"""Every file a command writes (``boundary/outputs.py``): refused before the work when it is
not a regular file or a new name, or is one of the command's inputs; written whole or not at
all; a full disk one line naming the flag, the old file left as it was.

Invariant: after a refusal or a failed write nothing at the path has changed, and no
temporary file is left in its folder.
"""

import errno
import os

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
])
def test_check_output(tmp_path, path, said):
    """Each row: accepted (None) or the one line's telling part."""
    _setup(tmp_path)
    full = path if path.startswith("/") or not path else str(tmp_path / path)
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
