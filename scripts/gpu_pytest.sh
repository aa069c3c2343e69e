#!/usr/bin/env bash
# On a CUDA machine without package access, from the project root, after staging the
# chunks that scripts/offline_gpu/prepare.sh made (scripts/offline_gpu/README.md):
#   bash scripts/gpu_pytest.sh "0.31.0:-k 's7 or flashmla'" "0.32.0:-k s1" "0.33.0:-k s2" ...
#   HISPARSE_GPU_TESTS=tests/test_live_gpu_two.py bash scripts/gpu_pytest.sh "0.31.0:-k tp2"
#   (another test file: the two-GPU runs write tests/recorded/two_gpu/)
# Runs `pytest -m gpu --record` once per vLLM version (device-env.sh picks the torch that
# version needs); packs tests/recorded (recordings and each child's <name>.log) and the
# pytest logs into $OUT/gpu-pytest.tgz every 20 s (a command timeout keeps results).
set -uo pipefail
bash .gpu/run/device-setup.sh || exit 1
mkdir -p /tmp/gpu-logs
( while true; do sleep 20; tar czf "$OUT/gpu-pytest.tgz" tests/recorded /tmp/gpu-logs 2>/dev/null; done ) &
packer=$!
rc=0
for spec in "$@"; do
  v=${spec%%:*}; sel=${spec#*:}
  ( source .gpu/run/device-env.sh "$v"; export PYTHONPATH=$PWD:$PYTHONPATH
    eval python3 -m pytest -m gpu ${HISPARSE_GPU_TESTS:-tests/test_live_gpu.py} --record -p no:cacheprovider -q -rs $sel ) \
    > /tmp/gpu-logs/pytest-$v.log 2>&1 || rc=1
  tail -n 15 /tmp/gpu-logs/pytest-$v.log
done
kill $packer
tar czf "$OUT/gpu-pytest.tgz" tests/recorded /tmp/gpu-logs 2>/dev/null
exit $rc
