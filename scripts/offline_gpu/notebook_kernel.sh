#!/usr/bin/env bash
# The Jupyter kernel stack for executing a notebook on the GPU machine (pytest -m gpu
# tests/test_notebook_live_gpu.py), as cp312 manylinux x86_64 wheels with their
# dependencies, in .gpu/nb/ (about 20 MiB: one remote command carries it).  Run on a
# machine that reaches PyPI; prepare.sh runs it too.  On the device, scripts/gpu_notebook.sh
# installs from it only what the image and the bundle lack.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=$(cd "$HERE/../.." && pwd)/.gpu/nb
PY=${PYTHON:-python3}
# The versions this project's test extra resolves to (pyproject.toml), plus pytest.
DEPS=(nbclient==0.11.0 nbformat==5.11.1 ipykernel==7.4.0 ipywidgets==8.1.9 anywidget==0.9.21 pytest==9.2.0)
plat=()
for n in 17 26 28 31 34 35; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
rm -rf "$OUT"; mkdir -p "$OUT"
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plat[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
  -d "$OUT" "${DEPS[@]}" 2> >(grep -v "is ignored: it is neither" >&2)
echo "[offline_gpu] .gpu/nb: $(ls "$OUT" | wc -l) wheels, $(du -sh "$OUT" | cut -f1)" >&2
