#!/usr/bin/env bash
# Make Fashion-MNIST available offline: it ships as the Debian package dataset-fashion-mnist.
# Does nothing when the files are already under $FEDRUN_DATA (default ./data) or the Debian path.
set -euo pipefail
root="${FEDRUN_DATA:-data}"
for d in /usr/share/datasets/fashion-mnist "$root/fashion-mnist" "$root/FashionMNIST/raw"; do
  if ls "$d"/train-images-idx3-ubyte* >/dev/null 2>&1; then exit 0; fi
done
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "Installing Fashion-MNIST (Debian package dataset-fashion-mnist)..." >&2
  if ! apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; then
    apt-get update -qq >/dev/null && apt-get install -y -qq dataset-fashion-mnist >/dev/null
  fi
  exit 0
fi
echo "Fashion-MNIST not found: install the Debian package dataset-fashion-mnist (as root)," \
     "or put the four IDX files under $root/fashion-mnist" >&2
exit 1
