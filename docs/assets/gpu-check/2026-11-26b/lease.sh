#!/usr/bin/env bash
# Second lease (2026-11-26, third session): the cuda tests (with the features added after the first GPU check),
# then the bench lines of those features and workloads b, c, e on the GPU. Everything lands in $OUT.
set -u
PY=${PY:-python3}; DEV=${DEV:-cuda}; T_TESTS=${T_TESTS:-200}; T_LINE=${T_LINE:-50}
start=$(date +%s)
if [ "$DEV" != cpu ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/wheels/*.whl || exit 3
  export PYTHONPATH=/tmp/site
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/nvidia-smi.txt 2>&1
fi
export FEDRUN_DATA=$PWD/.gpu/data PYTHONUNBUFFERED=1 FEDRUN_TEST_DEVICE=$DEV PYTHONPATH=$PWD:${PYTHONPATH:-}
$PY -c "import torch,hydra,dp_accounting,opacus;print('torch',torch.__version__,torch.version.cuda,torch.cuda.is_available(),'hydra',hydra.__version__,'opacus',opacus.__version__)" 2>&1 | tee $OUT/env.txt
stage() { local name=$1 lim=$2; shift 2; local t0=$(date +%s)
  timeout -k 5 $lim "$@" > $OUT/$name.log 2>&1; local rc=$?
  echo "stage $name rc=$rc $(( $(date +%s) - t0 ))s (limit $lim)" | tee -a $OUT/stages.txt; tail -${TAILN:-4} $OUT/$name.log; }
TAILN=30 stage cuda-tests $T_TESTS $PY -m pytest tests/cuda -q -p no:cacheprovider --durations=8 ${PYTEST_K:-}
for w in dp compression personal stragglers async; do
  stage bench-$w $T_LINE $PY scripts/bench.py --child --what $w --reps 2 --device $DEV --threads 1
done
stage bench-bce $(( T_LINE * 3 )) $PY scripts/bench.py --device $DEV --quick --workloads b,c,e --timeout $T_LINE
echo "total $(( $(date +%s) - start ))s" | tee -a $OUT/stages.txt
