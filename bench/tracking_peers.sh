#!/usr/bin/env bash
# Runs bench/tracking_peers.py: kv0.tracking beside MLflow, Aim and trackio,
# each peer in a virtual environment of its own (bench/peer_venv.sh; Aim and
# MLflow pin conflicting dependencies), kv0 from .venv. Only the
# environments of the engines named by --engines are made. Arguments go to
# tracking_peers.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/peer_venv.sh"

engines=kv0,kv0-nowait,mlflow-file,mlflow-sqlite,aim,trackio
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --engines) engines="${args[i + 1]:-}" ;;
    --engines=*) engines="${args[i]#--engines=}" ;;
  esac
done

pythons=()
if [[ ,$engines, == *,mlflow-* ]]; then
  venv="$(peer_venv tracking-mlflow-venv mlflow==3.17.2)"
  pythons+=(--python "mlflow=$venv/bin/python")
fi
if [[ ,$engines, == *,aim,* ]]; then
  venv="$(peer_venv tracking-aim-venv aim==3.29.1)"
  pythons+=(--python "aim=$venv/bin/python")
fi
if [[ ,$engines, == *,trackio,* ]]; then
  venv="$(peer_venv tracking-trackio-venv trackio==0.43.0)"
  pythons+=(--python "trackio=$venv/bin/python")
fi

"$here/../.venv/bin/python" "$here/tracking_peers.py" "${pythons[@]}" "$@"
