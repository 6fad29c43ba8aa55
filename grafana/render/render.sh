#!/usr/bin/env bash
# Pictures of the two dashboards from real data, where Grafana cannot be installed (Debian does
# not package it): starts actcd (metrics on 127.0.0.1:2381) and Debian's Prometheus on
# grafana/prometheus.yml as checked in, drives actcd with actcd-bench (puts with compaction,
# ranges, 20k watchers receiving events, lease keep-alives) for DURATION seconds, then draws
# each dashboard with grafana/render/render.html (the panels' own queries through Prometheus'
# query_range API, in the dashboard's grid) in headless Chromium and writes
#   grafana/actcd-overview.png  grafana/actcd-actors.png
# It also runs scripts/check-etcd-queries on the collected history, which is long enough for
# the one official expression that needs 2 minutes of samples.
#
# Usage: grafana/render/render.sh [DURATION]      (default 150 s; needs port 2381 free)
# Installs chromium and prometheus with apt-get if missing (a policy-rc.d keeps services from
# starting). Builds actcd and actcd-bench in the release profile.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DURATION="${1:-150}"
TARGET="$(scripts/target-dir)"

die() { echo "render.sh: $*" >&2; exit 1; }
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

scripts/install-deps.sh packages chromium prometheus
port_free 2381 || die "127.0.0.1:2381 is in use; grafana/prometheus.yml scrapes it, so actcd's metrics must go there"
cargo build --release -q -p actcd -p actcd-bench
ACTCD="$TARGET/release/actcd"
BENCH="$TARGET/release/actcd-bench"

WORK=$(mktemp -d /tmp/actcd-render.XXXXXX)
PIDS=()
cleanup() {
    # The load's subshells may still be sleeping: their children first, then them.
    for pid in "${PIDS[@]}"; do pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

CLIENT_PORT=$(free_port)
PROM_PORT=$(free_port)
WEB_PORT=$(free_port)
ENDPOINT="127.0.0.1:$CLIENT_PORT"
"$ACTCD" --data-dir "$WORK/actcd.data" --listen-client-urls "http://$ENDPOINT" \
    --advertise-client-urls "http://$ENDPOINT" --listen-metrics-urls http://127.0.0.1:2381 \
    --log-level warn >"$WORK/actcd.log" 2>&1 &
PIDS+=($!)
prometheus --config.file="$ROOT/grafana/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    "$BENCH" --endpoints "$ENDPOINT" --dial-timeout 1s range ready --total 1 >/dev/null 2>&1 && break
    sleep 0.1
done
"$BENCH" --endpoints "$ENDPOINT" --dial-timeout 1s range ready --total 1 >/dev/null 2>&1 ||
    die "actcd did not start: $(tail -3 "$WORK/actcd.log")"

FROM=$(date +%s)
echo "render.sh: $DURATION s of load on actcd at $ENDPOINT, Prometheus on 127.0.0.1:$PROM_PORT"
bench() { "$BENCH" --endpoints "$ENDPOINT" "$@" >>"$WORK/bench.log" 2>&1 || echo "render.sh: actcd-bench $1 failed" >&2; }
# Puts over 20k keys, compacted every 30 s; ranges of one key; both for the whole run.
bench --conns 4 --clients 16 put --rate 300 --total $((300 * DURATION)) --key-space-size 20000 \
    --compact-interval 30s &
PIDS+=($!)
bench --conns 2 --clients 8 range bench-key --rate 200 --total $((200 * DURATION)) &
PIDS+=($!)
# 20k watchers on 200 streams over 10 connections, 100 keys, events at 50 puts/s from 15 s on.
(sleep 15 && bench --conns 10 --clients 10 watch --streams 200 --watch-per-stream 100 \
    --watched-key-total 100 --put-total $((50 * (DURATION - 30))) --put-rate 50) &
PIDS+=($!)
# Bursts of lease keep-alive streams.
(for at in 30 60 90; do
    sleep 30
    if [[ $at -lt $DURATION ]]; then bench --conns 2 --clients 8 lease-keepalive --total 3000; fi
done) &
PIDS+=($!)
sleep "$DURATION"
sleep 10 # a tail after the load, so the picture shows it ending
TO=$(date +%s)

scripts/check-etcd-queries --prometheus "http://127.0.0.1:$PROM_PORT" --job actcd | tail -1

python3 -m http.server "$WEB_PORT" --bind 127.0.0.1 --directory "$ROOT/grafana" >"$WORK/http.log" 2>&1 &
PIDS+=($!)
sleep 1
for name in actcd-overview actcd-actors; do
    # The window is as tall as the dashboard's grid: 30 px cells, 8 px gaps, a 40 px header.
    rows=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(max(p['gridPos']['y']+p['gridPos']['h'] for p in d['panels']))" \
        "grafana/dashboards/$name.json")
    height=$((rows * 38 + 64))
    url="http://127.0.0.1:$WEB_PORT/render/render.html?dashboard=../dashboards/$name.json"
    url+="&prometheus=http://127.0.0.1:$PROM_PORT&from=$FROM&to=$TO&job=actcd&width=1600"
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$WORK/chromium-$name" --hide-scrollbars --virtual-time-budget=30000 \
        --window-size="1600,$height" --screenshot="$ROOT/grafana/$name.png" "$url" >"$WORK/chromium.log" 2>&1 ||
        die "chromium failed: $(tail -3 "$WORK/chromium.log")"
    echo "render.sh: grafana/$name.png (1600x$height, $(date -u -d "@$FROM" '+%Y-%m-%d %H:%M')–$(date -u -d "@$TO" '+%H:%M UTC'))"
done
