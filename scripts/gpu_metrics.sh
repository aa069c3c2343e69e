#!/usr/bin/env bash
# On the H200 (after staging scripts/offline_gpu/prepare.sh's chunks, as for gpu_live.sh):
#   bash scripts/gpu_metrics.sh VLLM_VERSION [metrics_run options...]
# Replays tests/traces/azure-code-2023-excerpt.csv (4x faster) through vllm serve's engine
# (hisparse_model/engine/metrics_run.py) and writes /metrics snapshots, vLLM's periodic
# stats log lines (console.log) and run.json (provenance) to $OUT/metrics-run/.
set -uo pipefail
v=$1; shift
bash .gpu/run/device-setup.sh || exit 1
source .gpu/run/device-env.sh "$v"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export VLLM_DEEP_GEMM_WARMUP=skip
mkdir -p "$OUT/metrics-run"
timeout 560 python3 -m hisparse_model.engine.metrics_run \
  --trace tests/traces/azure-code-2023-excerpt.csv --speed 4 --warmup --snapshots 10,30,50 --out "$OUT/metrics-run" "$@" \
  > "$OUT/metrics-run/console.log" 2>&1
rc=$?
tail -c 5000 "$OUT/metrics-run/console.log"
ls -la "$OUT/metrics-run"
exit $rc
