#!/usr/bin/env bash
# The main job: a demo of kv0 on a local directory (default ./kv0-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
exec build/kv0_demo "${1:-kv0-demo}"
