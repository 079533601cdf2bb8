#!/usr/bin/env bash
# The main job: a demo of kv0 on a local directory (default ./kv0-demo), then
# a chart of the run it logged, drawn from storage (DIR/loss.svg).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-kv0-demo}"
out="$(build/kv0_demo "$dir")"
printf '%s\n' "$out"
run="$(sed -n 's/^logged run \([^ ]*\) into .*/\1/p' <<<"$out")"
build/kv0 plot "$dir/tracking" "$run" loss --out "$dir/loss.svg"
