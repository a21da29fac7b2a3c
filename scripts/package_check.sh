#!/usr/bin/env bash
# `make package-check`: build fedrun's wheel, install it (not editable) into a fresh virtualenv without the
# system's packages, and run `fedrun --cfg job` and a 1-round smoke run from a directory outside the checkout.
# Proves that conf/ ships inside the package (pkg://fedrun.conf) and that nothing reads the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
BIN=${BIN:-.venv/bin}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rm -rf build
isolation=--no-build-isolation  # the dev venv's setuptools builds it; without one pip fetches setuptools
"$BIN/python" -c "import setuptools" 2>/dev/null || isolation=
"$BIN/pip" wheel . --no-deps $isolation -q -w "$work/dist"
rm -rf build
wheel=$(ls "$work"/dist/fedrun-*.whl)
"$PYTHON" -m venv "$work/venv"
# torch pinned first: a CPU wheel of 2.13.0 is on disk here; unpinned, pip would fetch a CUDA build
"$work/venv/bin/pip" install -q --no-compile torch==2.13.0  # no .pyc: most of the time of a fresh install
"$work/venv/bin/pip" install -q --no-compile "$wheel"

mkdir "$work/elsewhere"
cd "$work/elsewhere"
export OMP_NUM_THREADS=1
cfg=$("$work/venv/bin/fedrun" --cfg job algorithm=fedprox)
grep -q "name: fedprox" <<<"$cfg"
"$work/venv/bin/python" -c "import fedrun.cli.main as c; assert '/site-packages/fedrun/conf' in c.CONF_DIR, c.CONF_DIR"
"$work/venv/bin/fedrun" experiment=smoke fl.rounds=1 hardware.threads=1 output.quiet=true hydra.run.dir=run
"$work/venv/bin/python" - <<'PY'
import json
s = json.load(open("run/summary.json"))
assert s["status"] == "completed" and s["rounds_completed"] == 1, s
print(f"package-check: the wheel runs from elsewhere: 1 round, test accuracy {100 * s['test_acc_final']:.2f}%")
PY
