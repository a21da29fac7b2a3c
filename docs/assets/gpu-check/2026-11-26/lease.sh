#!/usr/bin/env bash
# One lease: fedrun's GPU check in stages, each with its own time limit; everything lands in $OUT/gc.tar.gz.
# usage (device): bash .gpu/run.sh ; local dry run: PY=.venv/bin/python DEV=cpu OUT=/tmp/o bash .gpu/run.sh
set -u
PY=${PY:-python3}; DEV=${DEV:-cuda}
T_TESTS=${T_TESTS:-190}; T_BENCH=${T_BENCH:-170}; T_IMA=${T_IMA:-70}
BENCH_ARGS=${BENCH_ARGS:---workloads a,d --timeout 80}
start=$(date +%s)
if [ "$DEV" != cpu ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/wheels/*.whl || exit 3
  export PYTHONPATH=/tmp/site
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv > $OUT/nvidia-smi.txt 2>&1
fi
export FEDRUN_DATA=$PWD/.gpu/data PYTHONUNBUFFERED=1
G=$PWD/outputs/gc; mkdir -p $G
$PY -c "import torch,hydra,omegaconf;print('torch',torch.__version__,torch.version.cuda,torch.cuda.is_available(),'hydra',hydra.__version__)" 2>&1 | tee $G/env.txt
stage() { local name=$1 lim=$2; shift 2; local t0=$(date +%s)
  timeout -k 10 $lim "$@" > $G/$name.out 2>&1; local rc=$?
  echo "stage $name rc=$rc $(( $(date +%s) - t0 ))s (limit $lim)" | tee -a $G/stages.txt; tail -25 $G/$name.out; }
stage tests $T_TESTS $PY scripts/gpu_check.py --device $DEV --pytest-args "-v --durations=12" --skip-bench --skip-fedima --out $G/tests
stage bench $T_BENCH $PY scripts/gpu_check.py --device $DEV --quick --skip-tests --skip-fedima --bench-args "$BENCH_ARGS" --out $G/bench
stage fedima $T_IMA $PY scripts/gpu_check.py --device $DEV --quick --skip-tests --skip-bench --fedima-rounds 3 --out $G/fedima
echo "total $(( $(date +%s) - start ))s" | tee -a $G/stages.txt
tar czf $OUT/gc.tar.gz -C outputs gc
cat $G/*/*/gpu-check.md 2>/dev/null
