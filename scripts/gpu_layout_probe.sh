#!/usr/bin/env bash
# On the GPU machine (after staging scripts/offline_gpu/prepare.sh's chunks for VLLM_VERSION):
#   bash scripts/gpu_layout_probe.sh VLLM_VERSION CASES.json
# For each case of CASES.json (a list of objects, each with "name"), one after another, a
# fresh process starts the offline vllm.LLM with the case's hf_overrides and host pool
# (hisparse_model/engine/layout_probe.py) and writes what vLLM laid out, or its refusal;
# everything (results, console logs, provenance) is packed into $OUT/layout-VLLM_VERSION.tgz
# after each case, so a call cut short still brings back the cases it finished.
set -uo pipefail
v=$1; cases=$2
bash .gpu/run/device-setup.sh || exit 1
source .gpu/run/device-env.sh "$v"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export VLLM_ENABLE_V1_MULTIPROCESSING=0   # in process: the KV-cache config is read directly
export VLLM_DEEP_GEMM_WARMUP=skip          # nothing is served: the layout does not depend on it
dir=/tmp/layout-probe/layout-$v; rm -rf "$dir"; mkdir -p "$dir"
python3 - "$cases" "$dir" "$v" <<'PY'
import json, sys, subprocess, datetime, os
cases, out, v = sys.argv[1], sys.argv[2], sys.argv[3]
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
import importlib.metadata as md
prov = {"vllm": v, "torch": md.version("torch"), "gpu": gpu,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": f"bash scripts/gpu_layout_probe.sh {v} {cases}",
        "env": {k: os.environ[k] for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_DEEP_GEMM_WARMUP",
                                            "VLLM_USE_FLASHINFER_SAMPLER",
                                            "PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK") if k in os.environ},
        "patches": "none (device-env.sh's LD_PRELOAD NCCL stub and the env above only)"}
json.dump(prov, open(f"{out}/provenance.json", "w"), indent=1)
PY
n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$cases")
for i in $(seq 0 $((n - 1))); do
  name=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[int(sys.argv[2])]['name'])" "$cases" "$i")
  python3 -c "import json,sys; json.dump(json.load(open(sys.argv[1]))[int(sys.argv[2])], open(sys.argv[3], 'w'))" "$cases" "$i" "$dir/$name.case.json"
  echo "== $name ($(date +%T))"
  timeout -k 5 300 python3 -m hisparse_model.engine.layout_probe "$dir/$name.case.json" "$dir/$name.json" > "$dir/$name.log" 2>&1
  echo "   rc $? ($(date +%T))"; grep -m1 "HiSparse HMA" "$dir/$name.log" | cut -c1-300
  grep -m1 -E "HiSparse host pool has|exceeds the int16" "$dir/$name.log" | cut -c1-300
  tar -czf "$OUT/layout-$v.tgz" -C /tmp/layout-probe "layout-$v"
done
