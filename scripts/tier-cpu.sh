#!/usr/bin/env bash
# Each test tier's wall time and CPU time (all its processes: pytest workers, the servers and
# workers they start), one tier after another, as `make test` runs them (-n 3, by file).
# CPU is read from a cgroup-v1 cpuacct group when this machine lets root make one, otherwise
# from the rusage of waited-for children (which misses processes nobody waits for).
# Usage: scripts/tier-cpu.sh [tier ...]   (default: every folder of tests/ that holds tests)
# Writes test-output/tiers/<tier>.xml (JUnit, per-test durations) and prints a table.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
OUT=test-output/tiers
mkdir -p "$OUT"
tiers=("$@")
if [ ${#tiers[@]} -eq 0 ]; then
  for d in tests/*/; do ls "$d"test_*.py >/dev/null 2>&1 && tiers+=("$(basename "$d")"); done
fi
CG=/sys/fs/cgroup/cpuacct
printf '%-8s %8s %8s %7s %s\n' tier wall_s cpu_s tests result
for t in "${tiers[@]}"; do
  start=$(date +%s.%N)
  if [ -w "$CG" ] && mkdir -p "$CG/gpufleet-$t" 2>/dev/null; then
    echo 0 > "$CG/gpufleet-$t/cpuacct.usage"
    bash -c "echo \$\$ > $CG/gpufleet-$t/tasks; exec env PYTHONDONTWRITEBYTECODE= $BIN/python -m pytest -q -p no:cacheprovider -n 3 --dist loadfile --no-loadscope-reorder --junitxml=$OUT/$t.xml tests/$t" > "$OUT/$t.log" 2>&1
    rc=$?
    cpu=$(awk '{printf "%.0f", $1/1e9}' "$CG/gpufleet-$t/cpuacct.usage")
    rmdir "$CG/gpufleet-$t" 2>/dev/null
  else
    /usr/bin/time -f '%U %S' -o "$OUT/$t.time" env PYTHONDONTWRITEBYTECODE= $BIN/python -m pytest -q -p no:cacheprovider -n 3 --dist loadfile --no-loadscope-reorder --junitxml="$OUT/$t.xml" "tests/$t" > "$OUT/$t.log" 2>&1
    rc=$?
    cpu=$(awk '{printf "%.0f", $1+$2}' "$OUT/$t.time")
  fi
  wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.0f", e-s}')
  n=$(grep -o 'tests="[0-9]*"' "$OUT/$t.xml" 2>/dev/null | head -1 | tr -dc 0-9)
  printf '%-8s %8s %8s %7s %s\n' "$t" "$wall" "$cpu" "${n:-?}" "$([ $rc -eq 0 ] && echo ok || echo "rc=$rc")"
done
