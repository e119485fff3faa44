#!/usr/bin/env bash
# make bench, sweep part: the sweep's own overhead (scheduling, state file writes, reading
# metrics, starting processes) against its trials' time, on a 20-trial random sweep over
# optim.lr of the tiny addition model, one trial at a time (--jobs 1).
#   overhead = the sweep command's wall time - the sum of its trials' process wall times
# (each measured by the sweep from spawn to reaping, recorded in sweep.json). The reaping poll
# (10 ms) lands inside the trials' time, so the script also reports an upper bound that charges
# the sweep 10 ms per trial process. The overhead is a fixed cost per trial, so its share of
# 30-second trials is extrapolated as overhead per trial / 30 s.
# Prints a table and writes BUILD/bench/sweep.json; fails when the 30-second share is >= 1%.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${STEPS:-200}
TRIALS=${TRIALS:-20}
PY=/usr/bin/python3
out="$BUILD/bench"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BUILD/bin/dl-train" configs/addition.toml --print-config --set model.n_layer=1 --set model.n_embd=32 \
  --set model.n_head=2 --set "train.steps=$STEPS" --set train.batch_size=32 --set train.eval_every=0 \
  --set train.checkpoint_every=0 --set log.tensorboard=false --set log.samples=0 --set log.progress=\"none\" > "$tmp/base.toml"
cat > "$tmp/bench.sweep.toml" <<TOML
base = "base.toml"
metric = "val_loss"
[method]
name = "random"
seed = 1
trials = $TRIALS
[parameters]
"optim.lr" = { distribution = "log_uniform", min = 1e-4, max = 1e-2 }
TOML
start=$(date +%s.%N)
"$BUILD/bin/dl-train" sweep "$tmp/bench.sweep.toml" --dir "$tmp/sweep" --jobs 1 -q --format json > "$tmp/table.json"
end=$(date +%s.%N)
$PY - "$tmp/sweep/sweep.json" "$start" "$end" "$out/sweep.json" <<'PYEOF'
import json, sys
state = json.load(open(sys.argv[1]))
wall = float(sys.argv[3]) - float(sys.argv[2])
trials = state["trials"]
procs = len(trials)  # one process per trial without early stopping
trial_s = sum(t["seconds"] for t in trials)
overhead = wall - trial_s
bound = overhead + 0.010 * procs
per_trial, per_trial_bound = overhead / len(trials), bound / len(trials)
row = {"trials": len(trials), "sweep_wall_s": wall, "trial_seconds_sum": trial_s, "mean_trial_s": trial_s / len(trials),
       "overhead_s": overhead, "overhead_fraction": overhead / trial_s,
       "overhead_per_trial_s": per_trial, "overhead_per_trial_upper_s": per_trial_bound,
       "fraction_at_30s_trials": per_trial / 30, "fraction_at_30s_trials_upper": per_trial_bound / 30}
json.dump(row, open(sys.argv[4], "w"), indent=1)
print(f"sweep overhead: {len(trials)} trials of {trial_s / len(trials):.2f} s, sweep wall {wall:.2f} s, "
      f"trials {trial_s:.2f} s -> overhead {overhead:.3f} s = {100 * overhead / trial_s:.2f}% "
      f"({1000 * per_trial:.1f} ms per trial, <= {1000 * per_trial_bound:.1f} ms with the reaping poll)")
print(f"  at 30-second trials: {100 * per_trial / 30:.3f}% (upper bound {100 * per_trial_bound / 30:.3f}%)")
sys.exit(0 if per_trial_bound / 30 < 0.01 else 1)
PYEOF
