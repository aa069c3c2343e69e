#!/usr/bin/env bash
# On the H200 (after staging scripts/offline_gpu/prepare.sh's chunks for VLLM_VERSION):
#   bash scripts/gpu_serve.sh VLLM_VERSION TRACE NAME:S:SPEED:SECONDS:LIMIT[:HOST_POOL_GIB[:DEEP_GEMM_WARMUP]] [...]
# For each run, one after another (parallel engines on one GPU break vLLM's memory
# profiling): a real `vllm serve` with max_num_seqs S, warmed up, replays TRACE over HTTP
# at SPEED x its own times for at most SECONDS (hisparse_model/engine/serve_run.py); the
# whole run is cut at LIMIT seconds; HOST_POOL_GIB sets the HiSparse host pool (default:
# enough for the whole replay at once, serve_run.host_pool_gib_for).  Each run's
# server.log, client.jsonl, /metrics snapshots and run.json are packed into $OUT/NAME.tgz
# as soon as it ends (a device call brings back at most 8 files).  DeepGEMM's kernels are
# kept in HISPARSE_DG_CACHE (default /root/.cache/hisparse-deep-gemm) so that a later server
# on the same machine starts from what an earlier one compiled (run.json counts its files);
# HISPARSE_START_TIMEOUT (default 420) is how long a server may take to answer /health;
# HISPARSE_TIME_STEPS=1 times each batch inside the server's engine core (serve_run --time-steps:
# steps/steps-<pid>.jsonl in each run's folder, the clock's calibration from the served engine).
# The cache outlives the machine too: a carried .gpu/dg-cache-VLLM_VERSION.tgz is unpacked into
# it before the first server, and the cache is packed back into $OUT/dg-cache-VLLM_VERSION.tgz
# after the last run (copy it to .gpu/ here: a fresh machine then skips the 6-minute first fill).
set -uo pipefail
v=$1; trace=$2; shift 2
bash .gpu/run/device-setup.sh || exit 1
source .gpu/run/device-env.sh "$v"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# what the OpenAI server imports once the engine is up, checked before any engine starts
python3 -c "import uvicorn, prometheus_fastapi_instrumentator, openai
import model_hosting_container_standards.sagemaker, vllm.entrypoints.openai.api_server" || exit 1
dg=${HISPARSE_DG_CACHE:-/root/.cache/hisparse-deep-gemm}
if [ -f ".gpu/dg-cache-$v.tgz" ] && [ ! -d "$dg" ]; then
  mkdir -p "$dg" && tar -xzf ".gpu/dg-cache-$v.tgz" -C "$dg" && echo "DeepGEMM cache: $(find "$dg" -type f | wc -l) files from .gpu/dg-cache-$v.tgz"
fi
port=8100
for spec in "$@"; do
  IFS=: read -r name s speed seconds limit pool gemm <<< "$spec"
  out=/tmp/serve-runs/$name; rm -rf "$out"; mkdir -p "$out"
  echo "== $name: S $s, speed $speed, at most $seconds s of replay, $limit s in all ($(date +%T))"
  timeout -k 5 "$limit" python3 -m hisparse_model.engine.serve_run --trace "$trace" \
    --vllm-version "$v" --max-num-seqs "$s" --speed "$speed" --seconds "$seconds" \
    --port $port --out "$out" --deep-gemm-cache "$dg" \
    --start-timeout "${HISPARSE_START_TIMEOUT:-420}" ${pool:+--host-pool-gib "$pool"} ${gemm:+--deep-gemm-warmup "$gemm"} ${HISPARSE_TIME_STEPS:+--time-steps} > "$out/console.log" 2>&1
  echo "   rc $? ($(date +%T))"; tail -n 2 "$out/console.log" | cut -c1-600
  grep -m2 -E "stop=[0-9]+, capacity=" "$out/server.log" | cut -c1-300
  grep -o "DeepGEMM warmup: *[0-9]*%[^D]*" "$out/server.log" | tail -n 1 | cut -c1-120
  pkill -9 -f "vllm.entrypoints.cli.main serve" 2>/dev/null; pkill -9 -f "VLLM::EngineCore" 2>/dev/null
  sleep 2
  tar -czf "$OUT/$name.tgz" -C /tmp/serve-runs "$name"
  port=$((port + 1))
done
[ -d "$dg" ] && tar -czf "$OUT/dg-cache-$v.tgz" -C "$dg" . && echo "DeepGEMM cache packed: $(du -h "$OUT/dg-cache-$v.tgz" | cut -f1)"
