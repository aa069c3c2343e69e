"""The README's light path, run as a learner would: a fresh venv, ``.[notebooks]``, every notebook.

Reads the README's "Open the notebooks" commands (the block between
``<!-- light-path -->`` markers, so the README and this check cannot drift apart),
then in a new virtual environment in a temporary folder:

1. runs the ``pip install`` line, verbatim, from the repository root;
2. checks that neither torch nor vLLM came with it (the light path stays light);
3. checks that the ``jupyter lab`` the README starts is installed (``--version``:
   starting the server is the browser test's part);
4. executes every notebook in ``notebooks/`` headless with that environment's
   kernel (``jupyter nbconvert --execute``, two at a time on two cores, the live-engine
   cells skipped with ``HISPARSE_NOTEBOOK_LIVE=0``) and fails if one fails.

It prints each step's seconds and exits 0 when all passed, 1 otherwise.  CI runs
it (``.ci/run``); it needs the package index the README's install uses.

    python scripts/check_light_path.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "<!-- light-path -->"
CELL_TIMEOUT_S = 600  # a hang guard (tests/kernels.py: CELL_TIMEOUT), not a measure of a cell


def readme_commands(readme: str) -> list[str]:
    """The shell commands of the README's light-path block, in order (comments dropped)."""
    parts = readme.split(MARK)
    if len(parts) != 3:
        raise ValueError(f"README: expected one block between two {MARK} markers")
    block = re.search(r"```bash\n(.*?)```", parts[1], re.DOTALL)
    if block is None:
        raise ValueError("README: the light-path block has no ```bash fence")
    return [line.strip() for line in block.group(1).splitlines()
            if line.strip() and not line.strip().startswith("#")]


def _step(what: str, cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    print(f"{time.monotonic() - t0:6.1f} s  {what}: exit {done.returncode}", flush=True)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
    return done


def check(venv: str) -> bool:
    """Every step of the light path in the fresh environment ``venv``; True when all passed."""
    with open(os.path.join(ROOT, "README.md")) as f:
        commands = readme_commands(f.read())
    install = next(c for c in commands if c.startswith("pip install"))
    lab = next(c for c in commands if c.startswith("jupyter lab"))
    bin_ = os.path.join(venv, "bin")
    env = {**os.environ, "PATH": bin_ + os.pathsep + os.environ["PATH"], "VIRTUAL_ENV": venv,
           "HISPARSE_NOTEBOOK_LIVE": "0"}
    env.pop("PYTHONPATH", None)  # the package must come from the install, not a checkout path
    if _step("fresh venv", [sys.executable, "-m", "venv", venv]).returncode:
        return False
    if _step(install, shlex.split(install), cwd=ROOT, env=env).returncode:
        return False
    heavy = _step("neither torch nor vllm installed",
                  [os.path.join(bin_, "python"), "-c",
                   "import importlib.util as u, sys; "
                   "sys.exit(any(u.find_spec(m) for m in ('torch', 'vllm')))"], env=env)
    if heavy.returncode:
        return False
    if _step(f"{lab.split()[0]} {lab.split()[1]} --version",
             shlex.split(lab)[:2] + ["--version"], env=env).returncode:
        return False
    with tempfile.TemporaryDirectory(prefix="light-path-out-") as out:
        def run(nb: str) -> int:
            return _step(f"run {os.path.basename(nb)}", [
                "jupyter", "nbconvert", "--to", "notebook", "--execute", nb,
                f"--ExecutePreprocessor.timeout={CELL_TIMEOUT_S}",
                "--ExecutePreprocessor.kernel_name=python3", "--output-dir", out],
                cwd=os.path.dirname(nb), env=env).returncode

        # one kernel per core at a time: a notebook's kernel runs on one core
        notebooks = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
        with concurrent.futures.ThreadPoolExecutor(min(2, os.cpu_count() or 1)) as pool:
            return not any(pool.map(run, notebooks))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", metavar="DIR", help="make the venv in DIR and keep it")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    if args.keep:
        ok = check(os.path.abspath(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="light-path-venv-") as tmp:
            ok = check(os.path.join(tmp, "venv"))
    print(f"{time.monotonic() - t0:6.1f} s  light path {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
