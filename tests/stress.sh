#!/usr/bin/env bash
# Run test folders under CPU load, several times in a row: the proof that no test depends on speed.
#
#   bash tests/stress.sh [--times N] [--hogs K] [PYTEST ARGS / FOLDERS...]
#   bash tests/stress.sh --times 5 --hogs 2 tests/faults tests/tracking tests/capture tests/slurm
#
# K CPU-burning processes (Debian's `stress-ng --cpu K`, installed here if apt can; else K Python busy loops)
# run for the whole of every run; they are stopped on exit, error or Ctrl-C. The suite is installed and its
# services started exactly as tests/run.sh does (tests/setup.sh); pytest runs on TRAINLEDGER_TEST_WORKERS
# (default 3) xdist workers. Every run appends to test-artifacts/stress-<UTC time>.json (pass/fail/skip counts,
# seconds, load average) and prints a one-line summary. Exit status: 0 when every run passed, 1 otherwise,
# 2 for bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
TIMES=1
HOGS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --times|--hogs)
      if [ $# -lt 2 ]; then echo "error: $1 needs a number (see --help)" >&2; exit 2; fi
      if [ "$1" = --times ]; then TIMES=$2; else HOGS=$2; fi
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) break ;;
  esac
done
if ! [[ "$TIMES" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: --times must be a whole number of 1 or more, got '$TIMES'" >&2; exit 2
fi
if ! [[ "$HOGS" =~ ^[0-9]+$ ]]; then
  echo "error: --hogs must be a whole number (0 for none), got '$HOGS'" >&2; exit 2
fi

source tests/setup.sh
if ! command -v stress-ng >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  apt_install stress-ng || true  # no package: the Python busy loops below
fi

HOG_PGIDS=()
LOAD_PID=""
stop_hogs() {
  for pgid in "${HOG_PGIDS[@]}"; do kill -TERM -- "-$pgid" 2>/dev/null || true; done
  for pgid in "${HOG_PGIDS[@]}"; do wait "$pgid" 2>/dev/null || true; done
  HOG_PGIDS=()
  if [ -n "$LOAD_PID" ]; then kill "$LOAD_PID" 2>/dev/null || true; wait "$LOAD_PID" 2>/dev/null || true; fi
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM

HOG_KIND=none
if [ "$HOGS" -gt 0 ]; then
  if command -v stress-ng >/dev/null 2>&1; then
    HOG_KIND=stress-ng
    setsid stress-ng --cpu "$HOGS" --quiet >/dev/null 2>&1 &  # its own process group: stopped as one
    HOG_PGIDS+=("$!")
  else
    HOG_KIND=python
    for _ in $(seq "$HOGS"); do
      setsid "$VENV/bin/python" -c "while True: pass" &
      HOG_PGIDS+=("$!")
    done
  fi
fi

mkdir -p test-artifacts
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT="test-artifacts/stress-$STAMP.json"
LOADS="test-artifacts/stress-$STAMP.load"
( while :; do cut -d' ' -f1 /proc/loadavg >>"$LOADS"; sleep 10; done ) &  # the 1-min load every 10 s
LOAD_PID=$!
WORKERS=${TRAINLEDGER_TEST_WORKERS:-3}
echo "stress: $TIMES run(s) of pytest $* with $HOGS $HOG_KIND hog(s) on $(nproc) cores, $WORKERS workers -> $OUT"

failed=0
for i in $(seq "$TIMES"); do
  xml="test-artifacts/stress-$STAMP-run$i.xml"
  : >"$LOADS"
  start=$(date +%s.%N)
  set +e
  "$VENV/bin/python" -m pytest -q -n "$WORKERS" --dist loadgroup --junitxml="$xml" "$@" \
    >"test-artifacts/stress-$STAMP-run$i.log" 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  [ "$rc" -eq 0 ] || failed=1
  "$VENV/bin/python" tests/stress_record.py "$OUT" --run "$i" --times "$TIMES" --rc "$rc" --seconds "$start" "$end" \
    --junit "$xml" --loads "$LOADS" --hogs "$HOGS" --hog-kind "$HOG_KIND" --workers "$WORKERS" -- "$@"
done
rm -f "$LOADS"
exit "$failed"
