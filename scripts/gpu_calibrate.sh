#!/usr/bin/env bash
# On the GPU machine (after staging scripts/offline_gpu/prepare.sh's chunks for VLLM_VERSION):
#   bash scripts/gpu_calibrate.sh VLLM_VERSION
# The clock's calibration sweep (hisparse_model/engine/calibrate.py): each engine batch's wall
# time and composition, written to $OUT/calibration-VLLM_VERSION.json after every phase (a run
# cut at HISPARSE_CAL_LIMIT seconds, default 540, keeps what it measured), the engine's console
# in $OUT/calibration-VLLM_VERSION.log.
set -uo pipefail
v=$1
bash .gpu/run/device-setup.sh || exit 1
source .gpu/run/device-env.sh "$v"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
echo "== calibration on vLLM $v ($(date +%T))"
timeout -k 5 "${HISPARSE_CAL_LIMIT:-540}" python3 -m hisparse_model.engine.calibrate \
  --vllm-version "$v" --out "$OUT/calibration-$v.json" > "$OUT/calibration-$v.log" 2>&1
echo "   rc $? ($(date +%T))"
grep -E "pass [12]:|Error|error" "$OUT/calibration-$v.log" | tail -n 20 | cut -c1-300
