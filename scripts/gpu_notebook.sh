#!/usr/bin/env bash
# On a CUDA machine without package access, from the project root, after staging the
# bundle's chunks and .gpu/nb (to /root/stage/nb; scripts/offline_gpu/README.md):
#   bash scripts/gpu_notebook.sh VLLM_VERSION [PYTEST_ARGS ...]   (e.g. -k notebook_5)
# Installs the Jupyter kernel stack from .gpu/nb (only what the image and the bundle
# lack), then runs `pytest -m gpu tests/test_notebook_live_gpu.py`: notebook 4 executed
# headless with its live cell on.  Packs the pytest log, the live cell's recording and
# the engine child's log into $OUT/notebook-live.tgz.
set -uo pipefail
v=$1
bash .gpu/run/device-setup.sh || exit 1
source .gpu/run/device-env.sh "$v" || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH
# .gpu/nb when carried with this command, else where the staging copied it
wheels=.gpu/nb; [ -d "$wheels" ] || wheels=${HISPARSE_GPU_STAGE:-/root/stage}/nb
need=(nbclient nbformat ipykernel ipywidgets anywidget pytest)
export PYTHONUSERBASE=/tmp/nb-user
if ! python3 -m pip install -q --user --no-index --find-links "$wheels" --break-system-packages "${need[@]}"; then
  # A virtual environment has no user site: install beside it, searched last.
  python3 -m pip install -q --no-index --find-links "$wheels" --target /tmp/nb-site "${need[@]}" || exit 1
  export PYTHONPATH=$PYTHONPATH:/tmp/nb-site
fi
mkdir -p /tmp/nb-live
python3 -m pytest -m gpu tests/test_notebook_live_gpu.py -p no:cacheprovider -q -rs -vv -s "${@:2}" \
  > /tmp/nb-live/pytest.log 2>&1
rc=$?
cp test-artifacts/live-* /tmp/nb-live/ 2>/dev/null  # the live cells' recordings and logs
tar czf "$OUT/notebook-live.tgz" -C /tmp nb-live
tail -n 40 /tmp/nb-live/pytest.log
exit $rc
