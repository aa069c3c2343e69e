#!/usr/bin/env bash
# The README's two commands on a fresh clone, fresh venv, cold pip cache, no Chromium; then the
# full check four more times in a row (five in all), with other CPU-heavy work beside it.
set -u
L=/tmp/clean-logs; S=$L/summary.log
rm -rf /tmp/clean /tmp/pipcold; git clone -q <the checkout> /tmp/clean; cd /tmp/clean
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC')  commit $(git rev-parse --short HEAD)  $(nproc) CPUs  $(python3 --version)  chromium: $([ -x /usr/bin/chromium ] && echo present || echo absent)  user: $(id -un)" > $S
python3 -m venv .venv && . .venv/bin/activate
t0=$(date +%s)
PIP_CACHE_DIR=/tmp/pipcold pip install -e ".[test]" > $L/install.log 2>&1; rc=$?
echo "install: pip install -e \".[test]\"  exit $rc  $(( $(date +%s) - t0 )) s (pip cache cold: PIP_CACHE_DIR empty)  torch in venv: $(python -c 'import importlib.util as u; print(bool(u.find_spec("torch")))')" >> $S
for i in 1 2 3 4 5; do
  t0=$(date +%s)
  python scripts/run_tests.py > $L/run$i.log 2>&1; rc=$?
  echo "run $i: python scripts/run_tests.py  exit $rc  $(( $(date +%s) - t0 )) s  load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> $S
  grep -E "^\s+hisparse_model/views/" $L/run$i.log | awk '{print $1, $2}' | tr '\n' ';' > $L/views$i.txt
  grep -E "passed|failed|run_tests:|UNDER|under 90" $L/run$i.log | grep -v "^\." | tail -12 | sed 's/^/    /' >> $S
done
echo "# done $(date -u '+%H:%M:%S UTC')" >> $S
