"""The built package works without the repository: ``python -m build`` gives an sdist and a
wheel (built from that sdist) that carry the data files and the widgets' front ends, and
the wheel installed into a fresh venv answers through the ``hisparse`` console script.

Invariant: what ``pip install hisparse-model`` would give a user answers ``check`` and
``simulate --traffic`` exactly as the checkout does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from hisparse_flags import connector_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVE = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", *connector_flags()]
# files the package reads at run time, as the archives name them (inside the package)
CARRIED = ["hisparse_model/data/dsv32-config.json", "hisparse_model/data/traffic-example.json",
           "hisparse_model/views/numbers_pane.js", "hisparse_model/views/prompt_box.js"]


def _clean_env(venv: str) -> dict:
    """No repository on the path, no coverage hooks (the venv has no coverage)."""
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith("COVERAGE_")}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env["PATH"]
    env["VIRTUAL_ENV"] = venv
    return env


def _private_copy(folder) -> str:
    """The checkout's files (tracked, and untracked ones git does not ignore) copied to
    ``folder``: ``python -m build`` stages the sdist's tree and ``build/`` in the folder it
    builds, so two builds of the checkout itself (this module's tests on two xdist workers)
    took each other's staging tree away (run 5 of tests/recorded/logs/
    full-check-5x-2026-12-04.log: "No such file or directory: 'hisparse_model-0.1.0/tests/...'")."""
    import shutil

    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = os.path.join(ROOT, name)
        if os.path.isfile(src):  # a file deleted but not yet committed is skipped
            dst = os.path.join(str(folder), name)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
    return str(folder)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The sdist and wheel ``python -m build`` makes of the checkout, and a fresh venv with
    the wheel installed."""
    out = tmp_path_factory.mktemp("dist")
    source = _private_copy(tmp_path_factory.mktemp("source"))
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), source],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    venv = str(tmp_path_factory.mktemp("venv") / "v")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    env = _clean_env(venv)
    done = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", str(wheel)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return {"sdist": sdist, "wheel": wheel, "venv": venv, "env": env,
            "cwd": str(tmp_path_factory.mktemp("elsewhere"))}


def _hisparse(built, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(built["venv"], "bin", "hisparse"), *argv],
                          capture_output=True, text=True, env=built["env"], cwd=built["cwd"],
                          timeout=300)


def test_sdist_and_wheel_carry_the_data_files(built):
    """Both archives hold every data file and front end the package reads."""
    names = zipfile.ZipFile(built["wheel"]).namelist()
    with tarfile.open(built["sdist"]) as tar:
        in_sdist = ["/".join(n.split("/")[1:]) for n in tar.getnames()]  # drop "name-version/"
    for path in CARRIED:
        assert path in names, f"the wheel lacks {path}"
        assert path in in_sdist, f"the sdist lacks {path}"
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "hisparse = hisparse_model.__main__:main" in zipfile.ZipFile(
        built["wheel"]).read(entry).decode()


def test_installed_wheel_answers_check_and_traffic(built):
    """The venv's ``hisparse`` (no repository on the path) gives serve's default 0.31.0
    server the verdict the checkout gives, and serves the bundled example traffic."""
    check = _hisparse(built, "check", "--", *SERVE)
    # serve's defaults: S = 1024, B = 8192 -> C = min(8192, 1024 * 1) = 1024, W = 1025
    assert check.returncode == 0, check.stderr  # no --check: the answer, exit 0
    assert "EXPOSED" in check.stdout and "C = 1024" in check.stdout, check.stdout[:2000]
    where = subprocess.run(
        [os.path.join(built["venv"], "bin", "python"), "-c",
         "import hisparse_model, os; print(os.path.dirname(hisparse_model.__file__))"],
        capture_output=True, text=True, env=built["env"], cwd=built["cwd"], check=True)
    package = where.stdout.strip()
    assert package.startswith(built["venv"]), package  # the wheel's copy, not the checkout
    example = os.path.join(package, "data", "traffic-example.json")
    traffic = _hisparse(built, "simulate", "--max-num-seqs", "1024", "--max-num-batched-tokens",
                        "8192", "--max-model-len", "163840", "--host-pool-gib", "512", "--traffic", example,
                        "--minutes", "1", "--seeds", "1")
    assert traffic.returncode == 0, traffic.stderr
    assert "of 1 seeds" in traffic.stdout or "of 1 seed" in traffic.stdout, traffic.stdout[:1500]
    usage = _hisparse(built, "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: hisparse ")
    for sub in ("predict", "simulate", "check", "explain", "live", "app"):
        assert sub in usage.stdout
