"""The installed package carries every file it reads: package-data covers each non-Python file.

An editable install (as the README's) reads files from the source tree, so a file missing
from ``[tool.setuptools.package-data]`` only breaks a wheel install (``pip install .``):
the widgets' front ends (``views/*.js``) or the model config would be absent.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "hisparse_model"


def _package_data_globs() -> list[str]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-data"][PACKAGE]


def _data_files() -> list[str]:
    """Every file under the package that is not Python source or bytecode, relative to it."""
    out = []
    for here, dirs, files in os.walk(os.path.join(ROOT, PACKAGE)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith(".py"):
                out.append(os.path.relpath(os.path.join(here, name), os.path.join(ROOT, PACKAGE)))
    return sorted(out)


# file the package reads at run time -> shipped by a package-data glob
EXPECTED_DATA = [
    "data/dsv32-config.json",  # DeepSeek-V3.2's config, which the engine runs load (data/*.json)
    "views/numbers_pane.js",  # the numbers pane's front end, read by anywidget (views/*.js)
    "views/prompt_box.js",  # the prompt box's front end
]


def test_every_data_file_is_package_data():
    """Each non-Python file in the package matches a package-data glob, so a wheel ships it."""
    files = [f.replace(os.sep, "/") for f in _data_files()]
    assert set(EXPECTED_DATA) <= set(files)
    globs = _package_data_globs()
    missing = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
