#!/usr/bin/env bash
# make demo: train the built-in synthetic task (3-digit addition, configs/addition.toml) on the
# CPU, then ask the trained model sums from the held-out set. Takes under two minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
run="runs/demo-$(date +%Y%m%d-%H%M%S)"
"$BUILD/bin/dl-train" configs/addition.toml --run-dir "$run"
echo
echo "Held-out sums answered by the trained model (greedy decoding, $run):"
"$BUILD/bin/dl-train" sample --run-dir "$run" --prompts 12
