#!/usr/bin/env bash
# Runs bench/python_peers.py: kv0.DB beside lmdb, rocksdict, aimrocks, plyvel
# and slatedb, all in one process, the peers in a virtual environment of their
# own (bench/peer_venv.sh). Arguments go to python_peers.py.
set -euo pipefail
source "$(dirname "$0")/peer_venv.sh"
peers=(lmdb==3.0.0 rocksdict==0.3.29 aimrocks==0.5.2 plyvel==1.5.1 slatedb==0.17.0
       "moto[server]" boto3)
run_with_peers peers-venv python_peers.py "$@"
