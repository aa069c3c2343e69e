#!/usr/bin/env bash
# On a CUDA machine without package access, from the project root, after staging the
# chunks that scripts/offline_gpu/prepare.sh made (scripts/offline_gpu/README.md):
#   bash scripts/gpu_live.sh VLLM_VERSION SWEEP.json JOBS CHILD_TIMEOUT_S
# Assembles the bundle (once), selects that vLLM and its torch, runs the sweep with this
# project's engine module and packs the recordings, each child's console log
# (<name>.log) and failure stubs into $OUT/<sweep>.tgz (every 20 s, so a command-level
# timeout still returns what finished).  Children share the GPU under the runner's lock.
set -uo pipefail
v=$1; sweep=$2; jobs=${3:-2}; tmo=${4:-540}
name=$(basename "$sweep" .json)
bash .gpu/run/device-setup.sh || exit 1
source .gpu/run/device-env.sh "$v"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p /tmp/rec-$name
python3 -m hisparse_model live --sweep "$sweep" --out-dir /tmp/rec-$name --jobs "$jobs" \
  --timeout "$tmo" > /tmp/rec-$name/console.log 2>&1 &
pid=$!
# Stopped from outside (a command timeout): stop the runner, which kills its engine children.
trap 'kill -TERM $pid 2>/dev/null; wait $pid' INT TERM HUP
# Pack what exists every 20 s so a command-level timeout still returns results.
while kill -0 $pid 2>/dev/null; do
  sleep 20; tar czf "$OUT/$name.tgz" -C /tmp "rec-$name" 2>/dev/null
done
wait $pid; rc=$?
tar czf "$OUT/$name.tgz" -C /tmp "rec-$name"
tail -c 6000 /tmp/rec-$name/console.log
ls -la /tmp/rec-$name
exit $rc
