#!/usr/bin/env bash
# The Python environment of `make gpu-check`: the venv $GPU_VENV (default .venv-gpu), apart from .venv (make
# install / make test), holding a CUDA build of torch and fedrun's dependencies.
#  - torch: a CUDA build that the machine's $PYTHON already imports (a GPU image: NGC, a cloud deep-learning
#    image) is used as it is, made visible in the venv by a .pth file; otherwise the index's torch==2.13.0, which
#    on x86-64 Linux is the CUDA build;
#  - then pyproject's dependencies and pytest (fedrun itself runs from this checkout), and the Ray engine's
#    (the dist extra) when they can be installed: without them the Ray GPU test is skipped, with its reason.
# Offline (no package index): PIP_NO_INDEX=1 PIP_FIND_LINKS=<folder of wheels> make gpu-check
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
venv="${GPU_VENV:-.venv-gpu}"
stamp="$venv/.installed-stamp"
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then exit 0; fi

has_cuda_torch() { "$1" -c 'import sys, torch; sys.exit(torch.version.cuda is None)' >/dev/null 2>&1; }

if ! test -x "$venv/bin/python" && ! "$py" -m venv "$venv"; then
  # a bare Debian/Ubuntu lacks venv (and ensurepip): its package, as root
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || exit 1
  apt-get install -y -qq python3-venv >/dev/null || { apt-get update -qq && apt-get install -y -qq python3-venv; }
  rm -rf "$venv" && "$py" -m venv "$venv"
fi
if ! has_cuda_torch "$venv/bin/python"; then
  if has_cuda_torch "$py"; then
    site=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$site" >"$purelib/_gpu_check_base.pth"
    echo "gpu-check: using the CUDA torch that $py has, from $site" >&2
  else
    echo "gpu-check: installing torch==2.13.0 from the package index (its CUDA build on x86-64 Linux)..." >&2
    "$venv/bin/pip" install -q torch==2.13.0
  fi
fi

# pyproject's [project] dependencies and extras, read without building fedrun (no setuptools needed offline)
read_deps() {
  "$venv/bin/python" - "$1" <<'EOF'
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"] if sys.argv[1] == "main" else project["optional-dependencies"][sys.argv[1]]
print("\n".join(d for d in deps if not d.startswith("torch")))
EOF
}
if "$venv/bin/python" -c 'import tomllib' 2>/dev/null; then
  mapfile -t main < <(read_deps main)
  mapfile -t dist < <(read_deps dist)
  "$venv/bin/pip" install -q "${main[@]}" pytest
else # Python 3.10: no tomllib; pip reads pyproject while installing fedrun itself
  dist=(-e '.[dist]')
  "$venv/bin/pip" install -q -e . pytest
fi
"$venv/bin/pip" install -q "${dist[@]}" ||
  echo "gpu-check: the dist extra (ray) could not be installed: the Ray engine's GPU test will be skipped" >&2
touch "$stamp"
