#!/usr/bin/env python3
"""Writes grafana/dashboards/*.json, the two actcd dashboards, from the definitions below.

The JSON files are what Grafana imports and what is checked in; this script is how they are
made, so that every panel gets the same datasource reference, selector, layout rules and ids.
Edit here, then run `python3 grafana/generate.py` (or `--check` to see whether the checked-in
JSON is what this script writes; scripts/check-dashboards runs that).

Python standard library only.
"""

import json
import sys
from pathlib import Path

SCHEMA_VERSION = 39  # Grafana 10.4 / 11.x dashboard model
DS = {"type": "prometheus", "uid": "${datasource}"}
# Every panel filters on the two template variables; both are regexes (multi-value safe).
S = 'job=~"$job", instance=~"$instance"'
R = "$__rate_interval"

# gRPC codes that etcd's own alert (etcdHighNumberOfFailedGRPCRequests) counts as failures.
ERROR_CODES = "Unknown|FailedPrecondition|ResourceExhausted|Internal|Unavailable|DataLoss|DeadlineExceeded"


# ----------------------------------------------------------------------------------------
# Panel builders


def target(expr, legend, ref):
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": True,
        "refId": ref,
    }


def targets(*pairs):
    return [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(pairs)]


def p99_p50(bucket):
    """A histogram's p99 and p50 per instance, as two (expr, legend) pairs for timeseries()."""
    return [
        (f"histogram_quantile({q}, sum by (instance, le) (rate({bucket}{{{S}}}[{R}])))", f"p{p} {{{{instance}}}}")
        for q, p in (("0.99", 99), ("0.50", 50))
    ]


def timeseries(title, unit, *pairs, desc="", stack=False, w=8, h=8, overrides=None, log=None, decimals=None):
    custom = {
        "axisPlacement": "auto",
        "drawStyle": "line",
        "fillOpacity": 25 if stack else 8,
        "gradientMode": "none",
        "lineInterpolation": "linear",
        "lineWidth": 1,
        "pointSize": 4,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if stack else "none"},
    }
    if log:
        custom["scaleDistribution"] = {"type": "log", "log": log}
    defaults = {"color": {"mode": "palette-classic"}, "custom": custom, "unit": unit}
    if not log:  # a log axis cannot start at 0
        defaults["min"] = 0
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "timeseries",
        "title": title,
        "description": desc,
        "datasource": DS,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets(*pairs),
        "_size": (w, h),
    }


def stat(title, unit, expr, legend="{{instance}}", desc="", w=4, h=4, mappings=None, thresholds=None,
         text_mode="value", graph="none", kind="stat"):
    steps = thresholds or [{"color": "green", "value": None}]
    panel = {
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "fieldConfig": {
            "defaults": {
                "color": {"mode": "thresholds"},
                "mappings": mappings or [],
                "thresholds": {"mode": "absolute", "steps": steps},
                "unit": unit,
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "auto",
        },
        "targets": targets((expr, legend)),
        "_size": (w, h),
    }
    if kind == "stat":
        panel["options"].update({"colorMode": "value", "graphMode": graph, "justifyMode": "auto", "textMode": text_mode})
    else:  # gauge: a ratio, drawn from 0 to 1
        panel["fieldConfig"]["defaults"].update({"min": 0, "max": 1})
        panel["options"].update({"showThresholdLabels": False, "showThresholdMarkers": True})
    return panel


def dashed(regex):
    """Override: series whose display name matches regex are drawn dashed (limits, quotas)."""
    return {
        "matcher": {"id": "byRegexp", "options": regex},
        "properties": [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
                       {"id": "custom.fillOpacity", "value": 0}],
    }


def row(title, *lines, collapsed=False):
    """A dashboard row; lines are lists of panels laid out left to right."""
    return {"title": title, "lines": lines, "collapsed": collapsed}


# ----------------------------------------------------------------------------------------
# Dashboard assembly: ids, gridPos, variables


def variables(job_metric):
    def query_var(name, label, query):
        return {
            "current": {},
            "datasource": DS,
            "definition": query,
            "hide": 0,
            "includeAll": name == "instance",
            "label": label,
            "multi": name == "instance",
            "name": name,
            "options": [],
            "query": query,
            "refresh": 2,
            "regex": "",
            "skipUrlSync": False,
            "sort": 1,
            "type": "query",
        }

    return [
        {
            "current": {},
            "hide": 0,
            "includeAll": False,
            "label": "Data source",
            "multi": False,
            "name": "datasource",
            "options": [],
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "skipUrlSync": False,
            "type": "datasource",
        },
        query_var("job", "Job", f"label_values({job_metric}, job)"),
        query_var("instance", "Instance", f'label_values({job_metric}{{job=~"$job"}}, instance)'),
    ]


def assemble(uid, title, desc, rows):
    panels = []
    next_id = 1
    y = 0
    for r in rows:
        row_panel = {
            "type": "row",
            "title": r["title"],
            "collapsed": r["collapsed"],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            "id": next_id,
            "panels": [],
        }
        next_id += 1
        panels.append(row_panel)
        y += 1
        for line in r["lines"]:
            x = 0
            line_h = 0
            for p in line:
                w, h = p.pop("_size")
                p["id"] = next_id
                next_id += 1
                p["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
                x += w
                line_h = max(line_h, h)
                (row_panel["panels"] if r["collapsed"] else panels).append(p)
            assert x <= 24, f"{title}: line in row {r['title']!r} is {x} wide"
            y += line_h
    return {
        "annotations": {"list": []},
        "description": desc,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "asDropdown": False,
                "icon": "dashboard",
                "includeVars": True,
                "keepTime": True,
                "tags": ["actcd"],
                "targetBlank": False,
                "title": "actcd dashboards",
                "type": "dashboards",
            }
        ],
        "liveNow": False,
        "panels": panels,
        "refresh": "10s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["actcd", "etcd"],
        "templating": {"list": variables("actcd_actors")},
        "time": {"from": "now-30m", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


# ----------------------------------------------------------------------------------------
# actcd overview


def overview():
    leader_map = [{"type": "value", "options": {
        "0": {"color": "red", "index": 0, "text": "NO LEADER"},
        "1": {"color": "green", "index": 1, "text": "has leader"}}}]
    red_green = [{"color": "red", "value": None}, {"color": "green", "value": 1}]
    quota_steps = [{"color": "green", "value": None}, {"color": "orange", "value": 0.8}, {"color": "red", "value": 0.95}]

    status = row(
        "Status",
        [
            stat("Leader", "none", f"etcd_server_has_leader{{{S}}}", mappings=leader_map, thresholds=red_green,
                 desc="etcd_server_has_leader: 1 when the member knows a leader (a single actcd node leads itself)."),
            stat("Leader changes", "short", f"etcd_server_leader_changes_seen_total{{{S}}}",
                 desc="Leader changes seen since start (etcd counts its own first election, so 1 is normal)."),
            stat("Version", "none", f"etcd_server_version{{{S}}}", legend="{{server_version}}", text_mode="name",
                 desc="The etcd API version actcd reports (etcd_server_version{server_version})."),
            stat("Uptime", "s", f"time() - process_start_time_seconds{{{S}}}", desc="Seconds since the process started."),
            stat("Keys", "short", f"sum(etcd_debugging_mvcc_keys_total{{{S}}})", legend="keys", graph="area",
                 desc="Live keys (etcd_debugging_mvcc_keys_total), summed over the selected instances."),
            stat("DB size of quota", "percentunit",
                 f"etcd_mvcc_db_total_size_in_bytes{{{S}}} / etcd_server_quota_backend_bytes{{{S}}}",
                 kind="gauge", thresholds=quota_steps,
                 desc="Backend size over --quota-backend-bytes. etcd raises NOSPACE at 100%; its alert fires at 95%."),
        ],
    )

    requests = row(
        "Requests",
        [
            timeseries(
                "Requests by method and code", "reqps",
                (f"sum by (grpc_method, grpc_code) (rate(grpc_server_handled_total{{{S}}}[{R}]))"
                 f" and sum by (grpc_method, grpc_code) (grpc_server_handled_total{{{S}}}) > 0",
                 "{{grpc_method}} {{grpc_code}}"),
                w=12, h=9,
                desc="Completed RPCs per second by method and gRPC status (grpc_server_handled_total). Only "
                     "method/code pairs seen at least once are drawn; the counters exist pre-initialised for all."),
            timeseries(
                "Unary latency p50 / p99 by method", "s",
                (f"histogram_quantile(0.99, sum by (grpc_method, le) (rate(grpc_server_handling_seconds_bucket{{{S}, grpc_type=\"unary\"}}[{R}])))"
                 f" and on (grpc_method) sum by (grpc_method) (grpc_server_handling_seconds_count{{{S}, grpc_type=\"unary\"}}) > 0",
                 "p99 {{grpc_method}}"),
                (f"histogram_quantile(0.50, sum by (grpc_method, le) (rate(grpc_server_handling_seconds_bucket{{{S}, grpc_type=\"unary\"}}[{R}])))"
                 f" and on (grpc_method) sum by (grpc_method) (grpc_server_handling_seconds_count{{{S}, grpc_type=\"unary\"}}) > 0",
                 "p50 {{grpc_method}}"),
                w=12, h=9, log=10,
                desc="Server-side handling time of unary RPCs (grpc_server_handling_seconds); streams are left out "
                     "because their duration is the stream's lifetime. Empty gaps mean no calls in the window."),
        ],
        [
            timeseries(
                "Failed requests", "reqps",
                (f"sum by (grpc_method, grpc_code) (rate(grpc_server_handled_total{{{S}, grpc_code=~\"{ERROR_CODES}\"}}[{R}]))"
                 f" and sum by (grpc_method, grpc_code) (grpc_server_handled_total{{{S}, grpc_code=~\"{ERROR_CODES}\"}}) > 0",
                 "{{grpc_method}} {{grpc_code}}"),
                desc="RPCs ending in the codes etcd's failed-request alert counts (" + ERROR_CODES.replace("|", ", ") +
                     "). Empty is good: a pair appears once it has failed at least once."),
            timeseries(
                "Open gRPC streams", "short",
                (f"sum by (grpc_service) (grpc_server_started_total{{{S}, grpc_type=~\"bidi_stream|server_stream|client_stream\"}})"
                 f" - sum by (grpc_service) (grpc_server_handled_total{{{S}, grpc_type=~\"bidi_stream|server_stream|client_stream\"}})",
                 "{{grpc_service}}"),
                desc="Streaming RPCs started minus finished, per service (Watch and LeaseKeepAlive streams)."),
            timeseries(
                "Client traffic", "Bps",
                (f"sum by (instance) (rate(etcd_network_client_grpc_received_bytes_total{{{S}}}[{R}]))", "in {{instance}}"),
                (f"sum by (instance) (rate(etcd_network_client_grpc_sent_bytes_total{{{S}}}[{R}]))", "out {{instance}}"),
                desc="Bytes of gRPC messages received from and sent to clients."),
        ],
    )

    storage = row(
        "Storage",
        [
            timeseries(
                "WAL fsync latency", "s",
                *p99_p50("etcd_disk_wal_fsync_duration_seconds_bucket"),
                desc="Time of the fsync that makes a group commit durable. etcd warns above 0.5 s at p99."),
            timeseries(
                "Backend commit latency", "s",
                *p99_p50("etcd_disk_backend_commit_duration_seconds_bucket"),
                desc="Time to commit a batch to the backend (RocksDB write + sync). etcd warns above 0.25 s at p99."),
            timeseries(
                "DB size vs quota", "bytes",
                (f"etcd_mvcc_db_total_size_in_bytes{{{S}}}", "size {{instance}}"),
                (f"etcd_mvcc_db_total_size_in_use_in_bytes{{{S}}}", "in use {{instance}}"),
                (f"etcd_server_quota_backend_bytes{{{S}}}", "quota {{instance}}"),
                overrides=[dashed("/^quota/")], log=2,
                desc="Physical and logically used backend size against the quota (dashed). Log scale, so a small "
                     "database and a 2 GiB quota fit one axis."),
        ],
        [
            timeseries(
                "Keys", "short",
                (f"etcd_debugging_mvcc_keys_total{{{S}}}", "{{instance}}"),
                desc="Live keys (created minus deleted)."),
            timeseries(
                "MVCC operations", "ops",
                (f"sum(rate(etcd_mvcc_put_total{{{S}}}[{R}]))", "put"),
                (f"sum(rate(etcd_mvcc_range_total{{{S}}}[{R}]))", "range"),
                (f"sum(rate(etcd_mvcc_delete_total{{{S}}}[{R}]))", "delete"),
                (f"sum(rate(etcd_mvcc_txn_total{{{S}}}[{R}]))", "txn"),
                desc="Store operations per second (puts and deletes inside a txn count too)."),
            timeseries(
                "Proposals", "short",
                (f"sum(rate(etcd_server_proposals_committed_total{{{S}}}[{R}]))", "committed/s"),
                (f"sum(rate(etcd_server_proposals_applied_total{{{S}}}[{R}]))", "applied/s"),
                (f"sum(rate(etcd_server_proposals_failed_total{{{S}}}[{R}]))", "failed/s"),
                (f"sum(etcd_server_proposals_pending{{{S}}})", "pending"),
                desc="Writes committed and applied per second, failed writes per second, and writes in flight."),
        ],
    )

    watches = row(
        "Watches and clients",
        [
            timeseries(
                "Watches", "short",
                (f"actcd_watches{{{S}}}", "watches {{instance}}"),
                (f"etcd_debugging_mvcc_watcher_total{{{S}}}", "watchers (etcd) {{instance}}"),
                w=6, desc="Live watches; actcd_watches and etcd's watcher_total count the same thing."),
            timeseries(
                "Watch streams", "short",
                (f"etcd_debugging_mvcc_watch_stream_total{{{S}}}", "watch streams {{instance}}"),
                (f"actcd_actors{{{S}, actor=\"stream\"}}", "stream actors {{instance}}"),
                w=6, desc="Open Watch gRPC streams, and the stream actors serving them."),
            timeseries(
                "Connections", "short",
                (f"actcd_actors{{{S}, actor=\"conn\"}}", "{{instance}}"),
                w=6, desc="Client connections (one conn actor each)."),
            timeseries(
                "Slow watchers and pending events", "short",
                (f"etcd_debugging_mvcc_slow_watcher_total{{{S}}}", "slow watchers {{instance}}"),
                (f"etcd_debugging_mvcc_pending_events_total{{{S}}}", "pending events {{instance}}"),
                w=6, desc="Watchers behind the store revision (catching up) and events queued but not yet sent."),
        ],
    )

    process = row(
        "Process",
        [
            timeseries("Resident memory", "bytes", (f"process_resident_memory_bytes{{{S}}}", "RSS {{instance}}"),
                       desc="Resident set size of the actcd process."),
            timeseries("CPU", "percentunit", (f"rate(process_cpu_seconds_total{{{S}}}[{R}])", "{{instance}}"),
                       desc="CPU time per second (100% = one core)."),
            timeseries(
                "File descriptors", "short",
                (f"process_open_fds{{{S}}}", "open {{instance}}"),
                (f"process_max_fds{{{S}}}", "limit {{instance}}"),
                overrides=[dashed("/^limit/")], log=10, desc="Open file descriptors against the limit (dashed)."),
        ],
    )

    cluster = row(
        "Cluster",
        [
            timeseries(
                "Leadership", "short",
                (f"etcd_server_has_leader{{{S}}}", "has leader {{instance}}"),
                (f"etcd_server_is_leader{{{S}}}", "is leader {{instance}}"),
                (f"changes(etcd_server_leader_changes_seen_total{{{S}}}[{R}])", "leader changes {{instance}}"),
                w=8, decimals=0,
                desc="has_leader and is_leader per member (one member leads), and leader changes seen in the interval."),
            timeseries(
                "Proposals", "short",
                (f"etcd_server_proposals_pending{{{S}}}", "pending {{instance}}"),
                (f"rate(etcd_server_proposals_failed_total{{{S}}}[{R}])", "failed/s {{instance}}"),
                w=8, desc="Writes waiting for their commit on each member (forwarded ones included), and writes "
                          "that failed (no leader, leader changed, timed out)."),
            timeseries(
                "Peer round trip p99", "s",
                (f"histogram_quantile(0.99, sum by (instance, To, le) "
                 f"(rate(etcd_network_peer_round_trip_time_seconds_bucket{{{S}}}[{R}])))", "{{instance}} to {{To}}"),
                w=8, desc="Append calls (heartbeats included) from the leader to each follower."),
        ],
        [
            timeseries(
                "Peer traffic", "Bps",
                (f"sum by (instance, To) (rate(etcd_network_peer_sent_bytes_total{{{S}}}[{R}]))", "{{instance}} to {{To}}"),
                (f"sum by (instance, From) (rate(etcd_network_peer_received_bytes_total{{{S}}}[{R}]))",
                 "{{instance}} from {{From}}"),
                w=12, desc="Bytes of Raft messages and forwarded calls between members (empty on a single member)."),
            timeseries(
                "Log fsync p99", "s",
                (f"histogram_quantile(0.99, sum by (instance, le) "
                 f"(rate(etcd_disk_wal_fsync_duration_seconds_bucket{{{S}}}[{R}])))", "{{instance}}"),
                w=12, desc="The Raft log's fsyncs on each member: a slow one delays every commit."),
        ],
    )

    details = row(
        "Details",
        [
            timeseries(
                "gRPC messages by method", "cps",
                (f"sum by (grpc_method) (rate(grpc_server_msg_received_total{{{S}}}[{R}]))"
                 f" and sum by (grpc_method) (grpc_server_msg_received_total{{{S}}}) > 0", "received {{grpc_method}}"),
                (f"sum by (grpc_method) (rate(grpc_server_msg_sent_total{{{S}}}[{R}]))"
                 f" and sum by (grpc_method) (grpc_server_msg_sent_total{{{S}}}) > 0", "sent {{grpc_method}}"),
                w=24, desc="Messages per second; on streams every request and every response counts."),
        ],
        [
            timeseries("Virtual memory", "bytes", (f"process_virtual_memory_bytes{{{S}}}", "{{instance}}"), w=12,
                       desc="Virtual address space (includes reserved but untouched allocator arenas)."),
            timeseries("Started requests by method", "reqps",
                       (f"sum by (grpc_type, grpc_method) (rate(grpc_server_started_total{{{S}}}[{R}]))"
                        f" and sum by (grpc_type, grpc_method) (grpc_server_started_total{{{S}}}) > 0",
                        "{{grpc_method}} ({{grpc_type}})"),
                       w=12, desc="RPCs started per second (grpc_server_started_total)."),
        ],
        collapsed=True,
    )

    return assemble(
        "actcd-overview", "actcd overview",
        "actcd (etcd v3 API) at a glance: requests, latency, disk, database, watches, process. "
        "Series use etcd's names, so etcd's own dashboard works next to this one.",
        [status, requests, storage, watches, process, cluster, details],
    )


# ----------------------------------------------------------------------------------------
# actcd actors


def actors():
    per = (
        "{kind}: heap bytes held by the {kind} actors divided by the number of {what} (no value while there are none)."
    )
    memory = row(
        "Memory by actor kind",
        [
            timeseries(
                "Heap bytes by actor kind", "bytes",
                (f"sum by (actor) (actcd_actor_heap_bytes{{{S}}})", "{{actor}}"),
                w=12, h=9, stack=True,
                desc="Bytes each kind of actor reports holding (self-accounted, updated as it mutates), stacked. "
                     "One series per kind, never per stream or per watch."),
            timeseries(
                "Watch shard heap by shard", "bytes",
                (f"sum by (shard) (actcd_actor_heap_bytes{{{S}, actor=\"watch_shard\"}})", "shard {{shard}}"),
                w=12, h=9, desc="Heap bytes per watch shard; an even spread means watches are balanced."),
        ],
        [
            timeseries(
                "Bytes per watch", "bytes",
                (f"sum by (instance) (actcd_actor_heap_bytes{{{S}, actor=\"watch_shard\"}})"
                 f" / (sum by (instance) (actcd_watches{{{S}}}) > 0)", "{{instance}}"),
                desc=per.format(kind="watch_shard", what="live watches")),
            timeseries(
                "Bytes per stream", "bytes",
                (f"sum by (instance) (actcd_actor_heap_bytes{{{S}, actor=\"stream\"}})"
                 f" / (sum by (instance) (actcd_actors{{{S}, actor=\"stream\"}}) > 0)", "{{instance}}"),
                desc=per.format(kind="stream", what="stream actors")),
            timeseries(
                "Bytes per connection", "bytes",
                (f"sum by (instance) (actcd_actor_heap_bytes{{{S}, actor=\"conn\"}})"
                 f" / (sum by (instance) (actcd_actors{{{S}, actor=\"conn\"}}) > 0)", "{{instance}}"),
                desc=per.format(kind="conn", what="connections")),
        ],
        [
            timeseries(
                "Live actors by kind", "short",
                (f"sum by (actor) (actcd_actors{{{S}}})", "{{actor}}"),
                w=12, log=10, desc="How many actors of each kind are alive."),
            timeseries(
                "Mailbox depth by actor kind", "short",
                (f"max by (actor) (actcd_actor_mailbox_depth{{{S}}})", "{{actor}}"),
                w=12, desc="Messages waiting in the mailbox (largest over the actors of a kind). A depth that "
                           "keeps growing means that kind of actor is the bottleneck."),
        ],
    )

    allocator = row(
        "Allocator vs process",
        [
            timeseries(
                "jemalloc vs RSS vs actor heap", "bytes",
                (f"process_resident_memory_bytes{{{S}}}", "process RSS {{instance}}"),
                (f"actcd_jemalloc_resident_bytes{{{S}}}", "jemalloc resident {{instance}}"),
                (f"actcd_jemalloc_active_bytes{{{S}}}", "jemalloc active {{instance}}"),
                (f"actcd_jemalloc_allocated_bytes{{{S}}}", "jemalloc allocated {{instance}}"),
                (f"sum by (job, instance) (actcd_actor_heap_bytes{{{S}}})", "actor heap (sum) {{instance}}"),
                w=12, h=9,
                desc="From the outside in: what the kernel maps (RSS), what jemalloc holds in pages (resident, "
                     "active), what the program has allocated, and the part the actors account for."),
            timeseries(
                "Allocated bytes accounted by actors", "percentunit",
                (f"sum by (job, instance) (actcd_actor_heap_bytes{{{S}}}) / sum by (job, instance) (actcd_jemalloc_allocated_bytes{{{S}}})",
                 "{{instance}}"),
                w=6, h=9, desc="Sum of actor heap gauges over jemalloc allocated bytes. The rest is buffers in "
                               "flight, RocksDB (if it uses jemalloc), the runtime and code."),
            timeseries(
                "Memory outside the allocator", "bytes",
                (f"actcd_jemalloc_resident_bytes{{{S}}} - actcd_jemalloc_allocated_bytes{{{S}}}",
                 "jemalloc resident - allocated {{instance}}"),
                (f"process_resident_memory_bytes{{{S}}} - actcd_jemalloc_resident_bytes{{{S}}}",
                 "RSS - jemalloc resident {{instance}}"),
                w=6, h=9, desc="Allocator overhead and fragmentation, and resident memory jemalloc does not "
                               "manage (thread stacks, system-allocator users, mapped code)."),
        ],
    )

    rocksdb = row(
        "RocksDB",
        [
            timeseries(
                "RocksDB memory", "bytes",
                (f"actcd_rocksdb_memtable_bytes{{{S}}}", "memtables {{instance}}"),
                (f"actcd_rocksdb_block_cache_bytes{{{S}}}", "block cache {{instance}}"),
                stack=True, desc="Memtables (writes not yet flushed) and block cache usage."),
            timeseries(
                "RocksDB estimated keys", "short",
                (f"actcd_rocksdb_estimated_keys{{{S}}}", "RocksDB keys {{instance}}"),
                (f"etcd_debugging_mvcc_keys_total{{{S}}}", "live etcd keys {{instance}}"),
                desc="RocksDB's estimate of its keys (one per stored revision plus metadata) next to live keys."),
            timeseries(
                "Pending compaction bytes", "bytes",
                (f"actcd_rocksdb_pending_compaction_bytes{{{S}}}", "{{instance}}"),
                desc="Bytes RocksDB estimates compaction still has to rewrite; growth means compaction lags writes."),
        ],
    )

    group_commit = row(
        "Group commit",
        [
            timeseries(
                "Batch size (commands per group commit)", "short",
                *p99_p50("actcd_store_batch_size_bucket"),
                (f"sum by (instance) (rate(actcd_store_batch_size_sum{{{S}}}[{R}])) / sum by (instance) (rate(actcd_store_batch_size_count{{{S}}}[{R}]))",
                 "mean {{instance}}"),
                desc="Commands the store actor writes per group commit (one fsync). Larger batches under load "
                     "mean group commit is amortising fsyncs."),
            timeseries(
                "fsyncs and commands per second", "ops",
                (f"sum by (instance) (rate(actcd_store_fsyncs_total{{{S}}}[{R}]))", "fsyncs/s {{instance}}"),
                (f"sum by (instance) (rate(actcd_store_batch_size_count{{{S}}}[{R}]))", "group commits/s {{instance}}"),
                (f"sum by (instance) (rate(actcd_store_batch_size_sum{{{S}}}[{R}]))", "commands/s {{instance}}"),
                desc="fsyncs per second against the commands they made durable."),
            timeseries(
                "Group commit fsync latency", "s",
                *p99_p50("etcd_disk_wal_fsync_duration_seconds_bucket"),
                desc="Duration of the group commit's fsync (etcd_disk_wal_fsync_duration_seconds)."),
        ],
    )

    return assemble(
        "actcd-actors", "actcd actors",
        "What no etcd shows: memory held by each kind of actor, per watch/stream/connection costs, mailbox "
        "depths, allocator and RocksDB memory, and group commit.",
        [memory, allocator, rocksdb, group_commit],
    )


# ----------------------------------------------------------------------------------------

DASHBOARDS = {"actcd-overview.json": overview, "actcd-actors.json": actors}


def render(fn):
    return json.dumps(fn(), indent=2, ensure_ascii=False) + "\n"


def main():
    out = Path(__file__).resolve().parent / "dashboards"
    check = "--check" in sys.argv[1:]
    stale = []
    for name, fn in DASHBOARDS.items():
        text = render(fn)
        path = out / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            out.mkdir(exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("out of date with grafana/generate.py (run python3 grafana/generate.py): " + ", ".join(stale))
        sys.exit(1)


if __name__ == "__main__":
    main()
