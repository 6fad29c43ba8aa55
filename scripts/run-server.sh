#!/usr/bin/env bash
# Builds actcd (release) and starts it on etcd's defaults: client URL http://127.0.0.1:2379,
# data dir ./default.actcd. Extra arguments go to actcd (e.g. --data-dir /var/lib/actcd).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh server
exec cargo run --release --locked --bin actcd -- "$@"
