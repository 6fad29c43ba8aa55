# Sourced by the benches that start three-member clusters (cluster-compare, failover-compare):
# free loopback ports, a cluster of actcd, an older actcd ($BEFORE) or etcd ($ETCD) on fresh
# data dirs under $WORK, and its leader. The caller sets WORK, ACTCD, ETCD (and BEFORE for the
# "before" kind) and traps EXIT to `cleanup`.
PIDS=()
stop() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done; PIDS=(); }
cleanup() { stop; rm -rf "$WORK"; }

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "no server on $1" >&2; exit 1; }

start_cluster() { # kind round: starts three members; sets MEMBERS (their client URLs, in PIDS'
                  # order), CLIENTS (the same, comma separated), LEADER (its URL), LEADER_PID
    local kind=$1 round=$2 i peers=() initial=""
    MEMBERS=()
    for i in 1 2 3; do peers+=("http://127.0.0.1:$(port)"); MEMBERS+=("http://127.0.0.1:$(port)"); done
    for i in 1 2 3; do initial+="${initial:+,}m$i=${peers[$((i-1))]}"; done
    for i in 1 2 3; do
        local dir="$WORK/$kind-$round-m$i" common=(--name "m$i" --data-dir "$WORK/$kind-$round-m$i"
            --listen-client-urls "${MEMBERS[$((i-1))]}" --advertise-client-urls "${MEMBERS[$((i-1))]}"
            --listen-peer-urls "${peers[$((i-1))]}" --initial-advertise-peer-urls "${peers[$((i-1))]}"
            --initial-cluster "$initial" --initial-cluster-token bench --quota-backend-bytes 8589934592)
        if [[ $kind != etcd ]]; then
            local binary="$ACTCD"; [[ $kind == before ]] && binary="$BEFORE"
            "$binary" "${common[@]}" --listen-metrics-urls "http://127.0.0.1:$(port)" >"$dir.log" 2>&1 &
        else
            "$ETCD" "${common[@]}" --log-level error >"$dir.log" 2>&1 &
        fi
        PIDS+=($!)
    done
    for i in 1 2 3; do wait_for "${MEMBERS[$((i-1))]##*:}"; done
    CLIENTS=$(IFS=,; echo "${MEMBERS[*]}")
    LEADER=""
    for _ in $(seq 1 100); do
        LEADER=$(ETCDCTL_API=3 etcdctl --endpoints "$CLIENTS" endpoint status 2>/dev/null | awk -F', ' '$5=="true"{print $1}' | head -1)
        [[ -n "$LEADER" ]] && break
        sleep 0.2
    done
    [[ -n "$LEADER" ]] || { echo "$kind: no leader" >&2; exit 1; }
    LEADER="http://${LEADER#http://}"
    for i in 1 2 3; do [[ "${MEMBERS[$((i-1))]}" == "$LEADER" ]] && LEADER_PID=${PIDS[$((i-1))]}; done
    return 0
}
