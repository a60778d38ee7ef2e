#!/usr/bin/env bash
# Times issue 32's targets on this machine (release build; wall-clock, so run it on an idle
# machine): capacity of the 16-instance cluster, plan over 256 and 1,024 configurations of the
# 70B question, the same plan in two shards joined by merge, and in four shards from a shared
# plan.bound. Numbers: docs/capacity.md.
#
#   bash benches/capacity-plan.sh            # everything (~5 minutes on 2 cores)
#   QUICK=1 bash benches/capacity-plan.sh    # capacity and the 256-configuration plan only
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
bin=target/release/servesim
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

timed() {
  local label=$1
  shift
  local t0 t1
  t0=$(date +%s%N)
  "$@" >"$out/last.txt" 2>"$out/last.err" || true
  t1=$(date +%s%N)
  printf '%-52s %4d.%d s   %s\n' "$label" $(((t1 - t0) / 1000000000)) \
    $((((t1 - t0) / 100000000) % 10)) "$(grep -oE '[0-9]+ runs' "$out/last.err" | head -1)"
}

timed "capacity cluster-16, 20,000 requests per run" \
  $bin capacity scenarios/cluster-16.ron --set workload.num_requests=20000
timed "plan scenarios/plan.ron (256 configurations)" \
  $bin plan scenarios/plan.ron --out "$out/whole"
if [ -z "${QUICK:-}" ]; then
  timed "plan, 4 batch limits each (1,024 configurations)" \
    $bin plan scenarios/plan.ron \
    --set 'plan.max_num_seqs=[64,128,256,512]' \
    --set 'plan.max_num_batched_tokens=[2048,4096,8192,16384]'
  timed "plan shard 0/2" $bin plan scenarios/plan.ron --shard 0/2 --out "$out/s0"
  timed "plan shard 1/2" $bin plan scenarios/plan.ron --shard 1/2 --out "$out/s1"
  $bin merge "$out/s0" "$out/s1" --out "$out/merged" >"$out/merged.txt" 2>/dev/null
  echo "merged best: $(grep '^best:' "$out/merged.txt")"
  for i in 0 1 2 3; do
    timed "plan shard $i/4, plan.bound=80" $bin plan scenarios/plan.ron \
      --set plan.bound=80 --shard "$i/4" --out "$out/b$i"
  done
  $bin merge "$out"/b0 "$out"/b1 "$out"/b2 "$out"/b3 --out "$out/bmerged" >"$out/bmerged.txt" 2>/dev/null
  echo "merged best (bound): $(grep '^best:' "$out/bmerged.txt")"
fi
