#!/usr/bin/env bash
# The GPU check: build CUDA artifacts here (TVM, no GPU), verify and time them on a GPU machine
# with the standalone runner (CuPy [+ PyTorch], no TVM, no steptp).
#
#   benchmarks/gpu_check.sh build [JOB_DIR]   # here: writes JOB_DIR (default build/gpu_job)
#   benchmarks/gpu_check.sh run   [JOB_DIR]   # on the GPU machine: runner + report, < 8 min
#   benchmarks/gpu_check.sh compile [JOB_DIR] # here, with nvcc: every .cu compiles for sm_90
#
# `run` writes JOB_DIR/results.json (and $OUT/results.json when $OUT is set) and prints the
# per-kernel report (benchmarks/gpu_report.py).
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="${1:-}"
job="${2:-build/gpu_job}"
py="${PYTHON:-python3}"
case "$cmd" in
  build)
    if [ -x .venv/bin/python ]; then py=.venv/bin/python; fi
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$py" benchmarks/gpu_check.py "$job"
    ;;
  compile)
    "$py" steptp/gpu_runner/runner.py "$job" --mode compile --out "$job/compile.json" --quiet
    ;;
  run)
    mode=cupy
    if [ "$mode" = cupy ]; then nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv || true; fi
    timeout 470 "$py" steptp/gpu_runner/runner.py "$job" --mode "$mode" --budget-s 400 \
      --out "$job/results.json"
    if [ -n "${OUT:-}" ]; then cp "$job/results.json" "$OUT/results.json"; fi
    "$py" benchmarks/gpu_report.py "$job/results.json"
    ;;
  *)
    sed -n '2,11p' "$0"; exit 2
    ;;
esac
