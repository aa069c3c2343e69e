#!/usr/bin/env bash
# Two sweeps at once on one GPU (different vLLM versions, and so possibly different
# torch versions, in separate processes), after the staging of scripts/offline_gpu:
#   bash scripts/gpu_live_pair.sh V1 SWEEP1 JOBS1 V2 SWEEP2 JOBS2 CHILD_TIMEOUT_S
# Both sweeps' children take the same GPU-memory lock (/tmp/hisparse-live-gpu.lock), so
# their start-ups never overlap and none exits while another profiles.
set -uo pipefail
bash .gpu/run/device-setup.sh || exit 1
(OUT=$OUT bash scripts/gpu_live.sh "$1" "$2" "$3" "$7" > /tmp/pair1.log 2>&1) &
sleep 5
(OUT=$OUT bash scripts/gpu_live.sh "$4" "$5" "$6" "$7" > /tmp/pair2.log 2>&1) &
wait
tail -c 2000 /tmp/pair1.log; tail -c 2000 /tmp/pair2.log
