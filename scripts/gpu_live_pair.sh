#!/usr/bin/env bash
# Two sweeps at once on one H200 (different vLLM versions in separate processes):
#   bash scripts/gpu_live_pair.sh V1 SWEEP1 JOBS1 V2 SWEEP2 JOBS2 CHILD_TIMEOUT_S
set -uo pipefail
bash .gpu/run/device-setup.sh || exit 1
(OUT=$OUT bash scripts/gpu_live.sh "$1" "$2" "$3" "$7" > /tmp/pair1.log 2>&1) &
sleep 45
(OUT=$OUT bash scripts/gpu_live.sh "$4" "$5" "$6" "$7" > /tmp/pair2.log 2>&1) &
wait
tail -c 2000 /tmp/pair1.log; tail -c 2000 /tmp/pair2.log
