#!/usr/bin/env bash
# Builds actcd (release) and starts it on etcd's defaults: client URL http://127.0.0.1:2379,
# metrics http://127.0.0.1:2381, data dir ./default.actcd in the directory it is run from.
# Extra arguments go to actcd (e.g. --data-dir /var/lib/actcd).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh" server
exec cargo run --release --locked --manifest-path "$root/Cargo.toml" --bin actcd -- "$@"
