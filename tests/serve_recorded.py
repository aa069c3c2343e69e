"""The served replays' recordings (tests/recorded/serve/), for tests/test_serve_run.py and
tests/test_serve_compare.py: where they are, and a /metrics value read without the package's
reader (so a test of that reader has an independent reading to compare with)."""

import pathlib

HERE = pathlib.Path(__file__).resolve().parent
TRACES = HERE / "traces"
TRACE = str(TRACES / "azure-code-2023-excerpt.csv")
SERVE = HERE / "recorded" / "serve"
X4 = SERVE / "v0.31.0-s143-azure-x4-host1gib-cold"
X6 = SERVE / "v0.31.0-s143-azure-x6-host1gib"
H100_5GIB = SERVE / "v0.31.0-s143-azure-x6-host5gib-h100"  # 2026-12-06, the runner's pool
H100_1GIB = SERVE / "v0.31.0-s143-azure-x6-host1gib-h100"  # the same day, the 1 GiB pool


def sample(text: str, name: str) -> float:
    """A metric's value in a /metrics text: the sum of its samples (one per label set)."""
    lines = [l for l in text.splitlines()
             if l.startswith(name + "{") or l.startswith(name + " ")]
    assert lines, name
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def unpack(folders, out: pathlib.Path) -> pathlib.Path:
    """The runner's packed run folders (``*.tgz`` in ``folders``, as ``gpu_serve.sh`` packed
    them) unpacked into ``out``: one folder a run, named as the runner named it."""
    import tarfile

    for packed in sorted(p for folder in folders for p in pathlib.Path(folder).glob("*.tgz")):
        with tarfile.open(packed) as tar:
            tar.extractall(out, filter="data")
    return out
