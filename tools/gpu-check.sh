#!/usr/bin/env bash
# The whole GPU check in one command, for a machine with an NVIDIA GPU, TVM and torch on the
# import path (the project itself need not be installed): the bundled suite on cuda in
# isolation with -j 8 (what `tox -e gpu` runs, with --profile), then the attention benchmark
# on cuda. Every step has its own time limit, so one that hangs cannot take the others' time.
# Writes to $OUT (default reports/gpu-check): env.txt, suite.log, gpu.xml, gpu.md,
# attention.log.
#   bash tools/gpu-check.sh [SUITE_SECONDS] [BENCH_SECONDS]
set -u
cd "$(dirname "$0")/.."
out=${OUT:-reports/gpu-check}
mkdir -p "$out"
suite_s=${1:-330}
bench_s=${2:-120}
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc
  python3 -c "import tvm, torch; print('tvm', tvm.__version__, 'torch', torch.__version__)"
} > "$out/env.txt" 2>&1
start=$(date +%s.%N)
timeout -s TERM -k 20 "$suite_s" python3 -m cl_validate run model_cases --target cuda \
  --require-device -j 8 --profile --no-cache --junit "$out/gpu.xml" --markdown "$out/gpu.md" \
  > "$out/suite.log" 2>&1
rc=$?
echo "suite: exit $rc in $(python3 -c "import time; print(round(time.time() - $start, 1))") s" \
  | tee -a "$out/suite.log"
timeout -s TERM -k 10 "$bench_s" python3 benchmarks/attention_kernel.py --target cuda \
  --repeat 20 > "$out/attention.log" 2>&1
echo "attention benchmark: exit $?" | tee -a "$out/attention.log"
tail -n 25 "$out/suite.log"
grep -v Warning "$out/attention.log" | tail -n 20
