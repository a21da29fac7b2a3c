#!/usr/bin/env bash
# Opens the built site from disk (file://) in headless Chromium, as a reader would: the home page, a page reached by
# a navigation link, and the search for "sweep" (Material's ?q= opens the search with its results). Screenshots go
# to OUT/*.png; look at them. Without Chromium it says so and exits 0 (make docs has already checked every link).
# make docs-check then measures every page's layout at 1,280 px (scripts/check_layout.py).
# Usage: scripts/docs_screenshots.sh SITE OUT
set -euo pipefail
site=$(realpath "${1:-site}")
out=${2:-outputs/docs-check}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "docs-check: no Chromium here (apt-get install chromium); links were checked by scripts/check_site.py"
  exit 0
fi
mkdir -p "$out"
shot() {  # NAME URL
  timeout 60 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --allow-file-access-from-files \
    --virtual-time-budget=20000 --window-size=1280,900 --screenshot="$out/$1.png" "$2" >/dev/null 2>&1
  echo "docs-check: $out/$1.png <- $2"
}
shot home "file://$site/index.html"
shot sweeps "file://$site/sweeps.html"
shot search "file://$site/index.html?q=sweep"
for page in privacy systems compression personalised; do  # the capability pages: commands and results first
  shot "$page" "file://$site/$page.html"
done
