//! The command line: etcd benchmark's global flags and commands, checked for bad combinations,
//! then dispatched to `cmd::*` on a tokio runtime.

use crate::cmd;
use crate::conn::endpoint_uri;
use crate::format::parse_go_duration;
use crate::runner::{Out, Settings, Stop};
use clap::{ArgAction, Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

/// `actcd-bench`: etcd benchmark's commands against any etcd v3 endpoint.
#[derive(Debug, Parser)]
#[command(
    name = "actcd-bench",
    version,
    about = "A load client for etcd v3 endpoints (actcd or etcd) with etcd benchmark's commands, flags and report",
    after_help = "Boolean flags take an optional value: --sequential-keys, --sequential-keys=true or =false."
)]
pub struct Cli {
    /// Flags that every command takes.
    #[command(flatten)]
    pub global: Global,
    /// The benchmark to run.
    #[command(subcommand)]
    pub command: Command,
}

/// etcd benchmark's global flags, plus the bounds that keep every run from hanging.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// gRPC endpoints, comma separated (host:port or http://host:port).
    #[arg(long, global = true, value_delimiter = ',', default_value = "127.0.0.1:2379")]
    pub endpoints: Vec<String>,
    /// Total number of gRPC connections.
    #[arg(long, global = true, default_value_t = 1)]
    pub conns: usize,
    /// Total number of gRPC clients, spread round-robin over the connections.
    #[arg(long, global = true, default_value_t = 1)]
    pub clients: usize,
    /// Add a per-second time series (unix second, min/avg/max latency, throughput) to the report.
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub sample: bool,
    /// Print numbers with %g instead of %4.4f.
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub precise: bool,
    /// Print one JSON document instead of the text report.
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub json: bool,
    /// Bound on connecting to an endpoint.
    #[arg(long, global = true, default_value = "2s", value_parser = parse_go_duration)]
    pub dial_timeout: Duration,
    /// Bound on each request (counted as an error when exceeded).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_go_duration)]
    pub request_timeout: Duration,
    /// Stop the run when nothing succeeded for this long while requests were outstanding or
    /// failing (a dead or frozen server).
    #[arg(long, global = true, default_value = "15s", value_parser = parse_go_duration)]
    pub stall_timeout: Duration,
    /// Client threads: 1 runs every client on one thread (leanest: no cross-thread wake-ups,
    /// and the client never takes more than one core from a server on the same machine).
    #[arg(long, global = true, default_value_t = 1)]
    pub threads: usize,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmark put.
    Put(PutArgs),
    /// Benchmark range.
    Range(RangeArgs),
    /// Benchmark txn-put (transactions of --txn-ops puts).
    TxnPut(TxnPutArgs),
    /// Benchmark a mixed load of txn-put and txn-range.
    TxnMixed(TxnMixedArgs),
    /// Benchmark watch: watch creation, then events delivered for concurrent puts.
    Watch(WatchArgs),
    /// Benchmark watch latency: from a put's send to each watcher's event.
    WatchLatency(WatchLatencyArgs),
    /// Benchmark watch fan-out: many watchers of one key, events delivered per second and
    /// put-to-event latency.
    WatchFanout(WatchFanoutArgs),
    /// Watch memory: one row of etcd's watch-memory table (clients x streams x watches) and the
    /// server's RSS, against a server already running (--server-pid); --table prints results in
    /// etcd's layout. `tables` runs the whole table, a fresh server per row.
    WatchMemory(WatchMemoryArgs),
    /// Benchmark lease keepalive (one short keep-alive stream per request).
    LeaseKeepalive(LeaseKeepaliveArgs),
    /// etcd's published tables, reproduced: storage memory (N keys x versions x key size x
    /// value size: server RSS), watch memory (clients x streams x watches: server RSS, with the
    /// fitted c1, c2, c3) and the put/range QPS of etcd's performance doc; printed in etcd's
    /// layout, written as JSON and PNG charts into --out.
    Tables(TablesArgs),
}

/// `put`.
#[derive(Debug, Clone, Args)]
pub struct PutArgs {
    /// Key size of put request.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size of put request.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Maximum puts per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Total number of put requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
    /// Use sequential keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub sequential_keys: bool,
    /// Interval to compact the database (e.g. 5m; 0 never).
    #[arg(long, default_value = "0", value_parser = parse_go_duration)]
    pub compact_interval: Duration,
    /// Delta between the current revision and the compact revision.
    #[arg(long, default_value_t = 1000)]
    pub compact_index_delta: i64,
    /// Check HashKV (and Status) of the first endpoint after the run.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub check_hashkv: bool,
}

/// `range key [end]`.
#[derive(Debug, Clone, Args)]
pub struct RangeArgs {
    /// The key (or the start of the range).
    pub key: String,
    /// The end of the range (exclusive).
    pub end: Option<String>,
    /// Total number of range requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Maximum requests per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Linearizable (l) or Serializable (s).
    #[arg(long, default_value = "l")]
    pub consistency: String,
    /// Maximum number of results (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub limit: i64,
    /// Only get the count.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub count_only: bool,
    /// Only get the keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub keys_only: bool,
    /// Range over every key with the prefix `key`.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub prefix: bool,
}

/// `txn-put`.
#[derive(Debug, Clone, Args)]
pub struct TxnPutArgs {
    /// Key size of txn put.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size of txn put.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Number of puts per txn.
    #[arg(long, default_value_t = 1)]
    pub txn_ops: u64,
    /// Maximum txns per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Total number of txn requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
}

/// `txn-mixed [key] [end]`.
#[derive(Debug, Clone, Args)]
pub struct TxnMixedArgs {
    /// Start of the read range (default: the first key).
    pub key: Option<String>,
    /// End of the read range (default: --end-key, else every key from `key` on).
    pub end: Option<String>,
    /// Key size of mixed txn.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size of mixed txn.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Maximum txns per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Total number of txn requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Read operation range end key (as the `end` argument).
    #[arg(long)]
    pub end_key: Option<String>,
    /// Read operation range result limit.
    #[arg(long, default_value_t = 1000)]
    pub limit: i64,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
    /// Linearizable (l) or Serializable (s).
    #[arg(long, default_value = "l")]
    pub consistency: String,
    /// Read/write ops ratio.
    #[arg(long, default_value_t = 1.0)]
    pub rw_ratio: f64,
}

/// `watch`.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Total watch streams.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Total watchers per stream.
    #[arg(long, default_value_t = 100)]
    pub watch_per_stream: usize,
    /// Total number of keys to be watched.
    #[arg(long, default_value_t = 1)]
    pub watched_key_total: usize,
    /// Number of keys to put per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub put_rate: u64,
    /// Number of put requests.
    #[arg(long, default_value_t = 1000)]
    pub put_total: u64,
    /// Key size of watch request.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
    /// Use sequential keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub sequential_keys: bool,
}

/// `watch-latency`.
#[derive(Debug, Clone, Args)]
pub struct WatchLatencyArgs {
    /// Total watch streams.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Total watchers per stream.
    #[arg(long, default_value_t = 10)]
    pub watchers_per_stream: usize,
    /// Ask for the previous key-value with each event.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub prevkv: bool,
    /// Total number of put requests.
    #[arg(long, default_value_t = 1000)]
    pub put_total: u64,
    /// Number of keys to put per second (0 is no limit).
    #[arg(long, default_value_t = 100)]
    pub put_rate: u64,
    /// Key size of watch response.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
    /// Value size of watch response (at least 8: the put's send time travels in it).
    #[arg(long, default_value_t = 32)]
    pub val_size: usize,
}

/// `watch-fanout`.
#[derive(Debug, Clone, Args)]
pub struct WatchFanoutArgs {
    /// Watchers of the one key, spread evenly over the streams.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Watch streams (spread over --clients, which spread over --conns).
    #[arg(long, default_value_t = 100)]
    pub streams: usize,
    /// Puts to the watched key.
    #[arg(long, default_value_t = 1000)]
    pub puts: u64,
    /// Puts per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub put_rate: u64,
    /// Concurrent putters, spread over the connections.
    #[arg(long, default_value_t = 8)]
    pub put_clients: usize,
    /// Key size of the watched key.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
    /// Value size of the puts (at least 8: the put's send time travels in the value).
    #[arg(long, default_value_t = 256)]
    pub val_size: usize,
}

/// `watch-memory`.
#[derive(Debug, Clone, Args)]
pub struct WatchMemoryArgs {
    /// The server's process id: its VmRSS is read from /proc/PID/status.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The server's name in the results (default: the process name of --server-pid).
    #[arg(long)]
    pub server: Option<String>,
    /// Rows: all (etcd's 15), quick (11 of them, up to 5M watches), small (6, up to 500k
    /// watches), big (etcd's rows not in quick), or a list like
    /// 1kx10x1,2kx50x100 (clients x streams per client x watches per stream). A run takes one.
    #[arg(long, default_value = "quick")]
    pub rows: String,
    /// Print RESULTS as etcd's table, one per server, with the fitted c1, c2, c3.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub table: bool,
    /// Run the row even when the estimate says it does not fit.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub force: bool,
    /// Wait after the last created response before reading the server's RSS.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub settle: Duration,
    /// Streams being opened at once.
    #[arg(long, default_value_t = 256)]
    pub open_concurrency: usize,
    /// Memory (MiB) the estimate keeps free for the rest of the machine.
    #[arg(long, default_value_t = 2048)]
    pub reserve_mib: u64,
    /// Longest estimated setup a row may take.
    #[arg(long, default_value = "10m", value_parser = parse_go_duration)]
    pub row_time_limit: Duration,
    /// Estimates are multiplied by this before they are compared with the machine.
    #[arg(long, default_value_t = 1.25)]
    pub margin: f64,
    /// Results of rows measured earlier (JSON documents of watch-memory --json): the table's
    /// rows (--table), or what a run's estimate is fitted from.
    pub results: Vec<PathBuf>,
}

/// `tables`.
#[derive(Debug, Clone, Args)]
pub struct TablesArgs {
    /// Start this server (actcd or etcd) itself on loopback: a fresh one, on a fresh data dir,
    /// for every row of the memory tables and one for the QPS runs. Without it, the server at
    /// --endpoints whose pid is --pid is measured.
    #[arg(long)]
    pub server: Option<String>,
    /// The server's binary (default: actcd next to actcd-bench; etcd on PATH or /usr/bin/etcd).
    #[arg(long)]
    pub server_bin: Option<PathBuf>,
    /// The pid of the server at --endpoints (its RSS is read from /proc/PID/status).
    #[arg(long)]
    pub pid: Option<u32>,
    /// A few small rows of each table and small request counts (about a minute): a smoke test.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub quick: bool,
    /// The tables to run: storage, watch, qps (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "storage,watch,qps")]
    pub only: Vec<String>,
    /// Storage rows: etcd (its 8 rows; the default), quick, or a list of
    /// KEYSxVERSIONSxKEYSIZExVALUESIZE like 100kx5x64x256.
    #[arg(long)]
    pub storage_rows: Option<String>,
    /// Watch rows: all (etcd's 15; the default), quick, small, big, or a list of
    /// CLIENTSxSTREAMSxWATCHES like 1kx10x1.
    #[arg(long)]
    pub watch_rows: Option<String>,
    /// Requests of each QPS run at 1 conn / 1 client (etcd's doc: 10000).
    #[arg(long)]
    pub qps_small: Option<u64>,
    /// Requests of each QPS run at 100 conns / 1000 clients (etcd's doc: 100000).
    #[arg(long)]
    pub qps_large: Option<u64>,
    /// Where the JSON, the tables and the charts go (default $ACTCD_BENCH_RESULTS/<UTC date>,
    /// or ~/actcd-bench-results/<UTC date> when that is not set).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Parent of the temp dir that holds the started servers' data dirs and logs.
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: PathBuf,
    /// Wait after a row's load before reading the server's RSS.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub settle: Duration,
    /// Most memory (GiB) server and client may take together in a row; bigger rows are skipped.
    #[arg(long, default_value_t = 16)]
    pub max_mem_gib: u64,
    /// Memory (MiB) kept free for the rest of the machine.
    #[arg(long, default_value_t = 2048)]
    pub reserve_mib: u64,
    /// Longest estimated time a row may take; longer rows are skipped (and a row that runs
    /// over it is stopped).
    #[arg(long, default_value = "10m", value_parser = parse_go_duration)]
    pub row_time_limit: Duration,
    /// --quota-backend-bytes of the servers started with --server (etcd's default 2 GiB is
    /// too small for 1M keys x 5 versions of 1 KiB).
    #[arg(long, default_value_t = 8 << 30)]
    pub quota_backend_bytes: u64,
    /// Measure nothing: put two results of `tables` (their JSON files, BASE then OTHER) side by
    /// side with the ratios OTHER / BASE, and chart both.
    #[arg(long, num_args = 2, value_names = ["BASE", "OTHER"])]
    pub compare: Vec<PathBuf>,
}

/// `lease-keepalive`.
#[derive(Debug, Clone, Args)]
pub struct LeaseKeepaliveArgs {
    /// Total number of lease keepalive requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
}

impl Command {
    /// The command's name, as etcd benchmark names it.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Put(_) => "put",
            Command::Range(_) => "range",
            Command::TxnPut(_) => "txn-put",
            Command::TxnMixed(_) => "txn-mixed",
            Command::Watch(_) => "watch",
            Command::WatchLatency(_) => "watch-latency",
            Command::WatchFanout(_) => "watch-fanout",
            Command::WatchMemory(_) => "watch-memory",
            Command::LeaseKeepalive(_) => "lease-keepalive",
            Command::Tables(_) => "tables",
        }
    }
}

/// Checks the global flags and turns them into [`Settings`].
pub fn settings(g: &Global) -> Result<Settings, String> {
    if g.conns == 0 {
        return Err("--conns must be at least 1".to_string());
    }
    if g.clients == 0 {
        return Err("--clients must be at least 1".to_string());
    }
    if g.threads == 0 {
        return Err("--threads must be at least 1".to_string());
    }
    if g.endpoints.is_empty() {
        return Err("--endpoints is empty".to_string());
    }
    for (flag, d) in [
        ("--dial-timeout", g.dial_timeout),
        ("--request-timeout", g.request_timeout),
        ("--stall-timeout", g.stall_timeout),
    ] {
        if d.is_zero() {
            return Err(format!("{flag} must be above 0"));
        }
    }
    let endpoints = g.endpoints.iter().map(|e| endpoint_uri(e)).collect::<Result<Vec<_>, _>>()?;
    Ok(Settings {
        endpoints,
        conns: g.conns,
        clients: g.clients,
        sample: g.sample,
        precise: g.precise,
        json: g.json,
        dial_timeout: g.dial_timeout,
        request_timeout: g.request_timeout,
        stall_timeout: g.stall_timeout,
        threads: g.threads,
    })
}

/// Parses the command line, runs the command and exits with its code: 0 on a finished run, 1
/// when it stopped early (unreachable endpoint, fatal error, stall, Ctrl-C), 2 on bad flags.
pub fn main() {
    let cli = Cli::parse();
    let code = match settings(&cli.global).and_then(|s| cmd::validate(&cli.command).map(|_| s)) {
        Err(e) => {
            eprintln!("actcd-bench {}: {e}", cli.command.name());
            2
        }
        Ok(settings) => match &cli.command {
            // Offline modes: no connection, no report, no client CPU line.
            Command::WatchMemory(a) if cmd::watch_memory::offline(a) => cmd::watch_memory::run_offline(a),
            Command::Tables(a) if !a.compare.is_empty() => cmd::tables::compare(a),
            _ => run(settings, cli.command),
        },
    };
    std::process::exit(code);
}

fn run(settings: Settings, command: Command) -> i32 {
    let built = if settings.threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(settings.threads).enable_all().build()
    };
    let runtime = match built {
        Ok(r) => r,
        Err(e) => {
            eprintln!("actcd-bench: cannot start the tokio runtime: {e}");
            return 1;
        }
    };
    let code = runtime.block_on(async move {
        let stop = Stop::new();
        let s = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                s.stop("interrupted (Ctrl-C)");
                eprintln!("\nactcd-bench: interrupted; reporting what completed (Ctrl-C again quits)");
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        let out = Out::new(command.name(), &settings);
        cmd::run(&settings, &stop, &out, command).await;
        out.finish(stop.reason())
    });
    // Requests dropped by a stop may still hold tasks; don't wait for them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}
