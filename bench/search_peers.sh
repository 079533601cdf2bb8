#!/usr/bin/env bash
# Runs bench/search_peers.py: kv0's run search beside MLflow's search_runs on
# the same runs, MLflow in a virtual environment of its own
# (bench/peer_venv.sh). Arguments go to search_peers.py.
set -euo pipefail
source "$(dirname "$0")/peer_venv.sh"
peers=(mlflow==3.17.2 pyarrow)
run_with_peers search-peers-venv search_peers.py "$@"
