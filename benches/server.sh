# Sourced by the bench scripts (watch-memory, watch-fanout): start actcd or Debian's etcd 3.4 on
# loopback with a fresh data dir, wait until it serves gRPC, stop it by its pid.
#
# Needs: BENCH (actcd-bench), ACTCD, ETCD (paths), WORK (a temp dir the caller removes).
# Sets:  SERVER_PID, SERVER_PORT.

SERVER_PID=""
SERVER_PORT=""
BUILD_INFO=""

# freeze_binaries: copies actcd and actcd-bench into $WORK/bin and runs those, so that a build
# in the shared target dir during a run cannot change the binaries under it. Sets BUILD_INFO.
freeze_binaries() {
    mkdir -p "$WORK/bin"
    cp "$ACTCD" "$WORK/bin/actcd"
    cp "$BENCH" "$WORK/bin/actcd-bench"
    BUILD_INFO="actcd built $(date -u -r "$ACTCD" '+%Y-%m-%d %H:%M UTC') (sha256 $(sha256sum "$ACTCD" | cut -c1-12)), work tree at $(git describe --always --dirty 2>/dev/null || echo unknown)"
    ACTCD="$WORK/bin/actcd"
    BENCH="$WORK/bin/actcd-bench"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# server_start KIND PORT PEER_PORT NAME: KIND is actcd or etcd; NAME names the data dir and log
# under $WORK (a data dir of that name is removed first). Returns 1 (with the log's tail on
# stderr) when the server exits or does not answer within 15 s.
server_start() {
    local kind=$1 port=$2 peer=$3 name=$4
    local data="$WORK/$name.data" log="$WORK/$name.log"
    rm -rf "$data"
    case "$kind" in
    etcd)
        "$ETCD" --name bench --data-dir "$data" \
            --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
            --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
            --initial-cluster "bench=http://127.0.0.1:$peer" --log-level warn >"$log" 2>&1 &
        ;;
    actcd)
        # Metrics on the peer port, which actcd has no use for: the default 127.0.0.1:2381 would
        # clash with another running actcd and with the Prometheus test (grafana/prometheus.yml).
        "$ACTCD" --name bench --data-dir "$data" \
            --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
            --listen-metrics-urls "http://127.0.0.1:$peer" \
            --log-level warn >"$log" 2>&1 &
        ;;
    *)
        echo "server_start: unknown server $kind" >&2
        return 1
        ;;
    esac
    SERVER_PID=$!
    SERVER_PORT=$port
    local _
    for _ in $(seq 150); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "$kind exited at start; the end of its log:" >&2
            tail -n 20 "$log" >&2
            SERVER_PID=""
            return 1
        fi
        if ! port_free "$port" &&
            "$BENCH" --endpoints "127.0.0.1:$port" --dial-timeout 1s --json range foo --total 1 >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    echo "$kind did not answer on 127.0.0.1:$port within 15 s" >&2
    server_stop
    return 1
}

# server_stop: SIGTERM, up to 10 s, then SIGKILL; only the pid this file started.
server_stop() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        local _
        for _ in $(seq 100); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=""
}

# machine_line: the date and the machine, for the top of a summary.
machine_line() {
    local cpu mem os
    cpu="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || echo unknown)"
    mem="$(awk '/^MemTotal:/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    os="$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || uname -s)"
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($cpu), $mem RAM, $os, kernel $(uname -r), open files $(ulimit -n); client and server share the machine"
}
