#!/usr/bin/env bash
# The whole GPU check in one command, for a machine with an NVIDIA GPU, TVM and torch on the
# import path (the project itself need not be installed): the bundled suite on cuda in
# isolation with -j 8 (what `tox -e gpu` runs, with --profile), then the attention benchmark
# on cuda, then the strided products benchmark on cuda. Where the suite fails, `pools` (the case
# that computed wrong on a GPU before) is run alone in one process, for its diagnosis.
# Every step has its own time limit, so one that hangs cannot take the others' time.
# Writes to $OUT (default reports/gpu-check): env.txt, fork.log (tools/gpu-fork-check.py),
# suite.log, gpu.xml, gpu.md, attention.log, strided.log (and pools.log where the suite failed).
#   bash tools/gpu-check.sh [SUITE_SECONDS] [BENCH_SECONDS] [STRIDED_SECONDS]
set -u
cd "$(dirname "$0")/.."
out=${OUT:-reports/gpu-check}
mkdir -p "$out"
suite_s=${1:-330}
bench_s=${2:-120}
strided_s=${3:-120}
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc
  python3 -c "import tvm, torch; print('tvm', tvm.__version__, 'torch', torch.__version__)"
} > "$out/env.txt" 2>&1
# which step of a run's process tree keeps a GPU from working, if one does (seconds)
timeout -s TERM -k 5 60 python3 tools/gpu-fork-check.py > "$out/fork.log" 2>&1
grep -v Warning "$out/fork.log" | grep -E "^(Landlock|plain|landlock|seccomp|confined|GPU case|after|this)"
start=$(date +%s.%N)
timeout -s TERM -k 20 "$suite_s" python3 -m cl_validate run model_cases --target cuda \
  --require-device -j 8 --profile --no-cache --junit "$out/gpu.xml" --markdown "$out/gpu.md" \
  > "$out/suite.log" 2>&1
rc=$?
echo "suite: exit $rc in $(python3 -c "import time; print(round(time.time() - $start, 1))") s" \
  | tee -a "$out/suite.log"
if [ "$rc" -ne 0 ]; then
  timeout -s TERM -k 10 60 python3 -m cl_validate run model_cases -k pools --target cuda \
    --require-device --no-cache --no-isolation > "$out/pools.log" 2>&1
  echo "pools alone: exit $?" | tee -a "$out/pools.log"
fi
timeout -s TERM -k 10 "$bench_s" python3 benchmarks/attention_kernel.py --target cuda \
  --repeat 20 > "$out/attention.log" 2>&1
echo "attention benchmark: exit $?" | tee -a "$out/attention.log"
timeout -s TERM -k 10 "$strided_s" python3 benchmarks/strided_products.py --target cuda \
  --repeat 10 > "$out/strided.log" 2>&1
echo "strided products benchmark: exit $?" | tee -a "$out/strided.log"
tail -n 25 "$out/suite.log"
grep -v Warning "$out/attention.log" | tail -n 20
grep -v Warning "$out/strided.log" | tail -n 20
