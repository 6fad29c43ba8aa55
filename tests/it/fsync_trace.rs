//! Fsync before acknowledgement, at the system-call level: strace (Debian's strace) follows
//! every thread of a running actcd while one client puts values one after another. For each
//! put, the trace must show, in this order: the request's HTTP/2 DATA frame read from the
//! client's socket, a write of the value to the Raft log's segment (`raft-wal/*.wal`), an
//! fdatasync (or fsync) of that file begun after the write and returned 0, and only then the first HEADERS or DATA frame of
//! the answer on the request's stream. strace stops each thread at every traced call until it
//! has logged it, so the log's line order is an order the calls really happened in: an answer
//! written before the fsync returned would be logged before the fsync's return. Then RocksDB's
//! own WAL, which gets the applied values without a sync of their own, must be synced behind
//! them within 500 ms (every 100 ms while it is written: a power loss replays at most that much
//! of the Raft log).

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::PutRequest;

use crate::harness::Server;

const PUTS: usize = 20;

/// One traced system call, its entry and exit line numbers in the log.
#[derive(Debug)]
struct Call {
    name: String,
    /// The file descriptor with strace's description of it (`-yy`), e.g. `41<TCP:[...]>`.
    fd: String,
    /// The buffers passed or filled, in order (only the bytes the call returned for reads).
    data: Vec<u8>,
    result: i64,
    entry: usize,
    exit: usize,
}

/// Decodes strace's `-xx` escapes (`\x41`) and leaves other characters as they are.
fn unescape(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / 4);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'x') && i + 4 <= bytes.len() {
            if let Ok(b) = u8::from_str_radix(&text[i + 2..i + 4], 16) {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// The calls of an `strace -f -yy -xx` log, with unfinished and resumed halves joined.
fn parse(log: &str) -> Vec<Call> {
    let mut pending: HashMap<&str, (usize, String)> = HashMap::new();
    let mut calls = Vec::new();
    for (line_no, line) in log.lines().enumerate() {
        let Some((pid, rest)) = line.split_once(' ') else { continue };
        let rest = rest.trim_start();
        let (entry, text) = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, (line_no, head.to_owned()));
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = tail.split_once(" resumed>") else { continue };
            let Some((entry, head)) = pending.remove(pid) else { continue };
            (entry, format!("{head}{tail}"))
        } else {
            (line_no, rest.to_owned())
        };
        let Some((name, args)) = text.split_once('(') else { continue };
        // strace pads the result to a column: `...)      = 8`.
        let Some((args, result)) = args.rsplit_once(" = ") else { continue };
        let Some(args) = args.trim_end().strip_suffix(')') else { continue };
        let result = result.split_whitespace().next().and_then(|r| r.parse().ok()).unwrap_or(-1);
        let fd = args.split([',', ')']).next().unwrap_or_default().to_owned();
        // Every quoted string after the descriptor is a buffer (-xx escapes any quote away).
        let mut data = Vec::new();
        for (i, piece) in args[fd.len()..].split('"').enumerate() {
            if i % 2 == 1 {
                data.extend(unescape(piece));
            }
        }
        // A failed call moved nothing; a short one only its first `result` bytes.
        data.truncate(usize::try_from(result).unwrap_or(0));
        calls.push(Call { name: name.to_owned(), fd, data, result, entry, exit: line_no });
    }
    calls
}

/// HTTP/2 frames (type, stream id, payload, index of the call that carried the frame's first
/// byte) in the bytes that `calls` moved, in order.
fn frames(calls: &[&Call], skip_preface: bool) -> Vec<(u8, u32, Vec<u8>, usize)> {
    let mut bytes = Vec::new();
    let mut origin = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        bytes.extend_from_slice(&call.data);
        origin.extend(std::iter::repeat_n(i, call.data.len()));
    }
    let mut at = if skip_preface && bytes.starts_with(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") { 24 } else { 0 };
    let mut out = Vec::new();
    while at + 9 <= bytes.len() {
        let len = usize::from(bytes[at]) << 16 | usize::from(bytes[at + 1]) << 8 | usize::from(bytes[at + 2]);
        let stream =
            u32::from_be_bytes([bytes[at + 5], bytes[at + 6], bytes[at + 7], bytes[at + 8]]) & 0x7fff_ffff;
        let end = (at + 9 + len).min(bytes.len());
        out.push((bytes[at + 3], stream, bytes[at + 9..end].to_vec(), origin[at]));
        at += 9 + len;
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn every_put_is_fdatasynced_before_its_answer_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::actcd(dir.path(), &[]).await;
    let trace = dir.path().join("strace.log");
    let calls = "read,readv,recvfrom,recvmsg,write,writev,sendto,sendmsg,pwrite64,pwritev,fsync,fdatasync";
    let mut strace = tokio::process::Command::new("strace")
        .args(["-f", "-yy", "-xx", "-s", "65536", "-e", &format!("trace={calls}"), "-o"])
        .arg(&trace)
        .args(["-p", &server.pid().to_string()])
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("strace runs (apt-get install strace)");
    let mut said = BufReader::new(strace.stderr.take().unwrap()).lines();
    let attached = tokio::time::timeout(Duration::from_secs(10), said.next_line()).await;
    assert!(
        matches!(attached, Ok(Ok(Some(ref l))) if l.contains("attached")),
        "strace did not attach: {attached:?}"
    );

    // A connection opened under the trace, so its bytes are seen from the preface on.
    let mut kv = KvClient::connect(server.endpoint.clone()).await.unwrap();
    let values: Vec<String> = (0..PUTS).map(|i| format!("fsync-probe-{i:03}")).collect();
    for value in &values {
        let put = PutRequest { key: "fsync/probe".into(), value: value.clone().into(), ..Default::default() };
        kv.put(put).await.unwrap();
    }
    // The client can read an answer as soon as its write is in the socket, before strace has
    // logged that write's return (it logs each call when it handles the thread's stop, which
    // on a loaded machine comes later). Stopping strace then would lose the line, so wait
    // until the log holds every answer (bounded; a real failure still fails below).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline
        && check(&std::fs::read_to_string(&trace).unwrap_or_default(), &values).is_err()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // RocksDB's own WAL, where the applied values go unsynced, is synced behind every 100 ms.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = std::process::Command::new("kill").arg(strace.id().unwrap().to_string()).status();
    assert!(stopped.is_ok_and(|s| s.success()));
    tokio::time::timeout(Duration::from_secs(10), strace.wait()).await.expect("strace detaches").unwrap();
    let log = std::fs::read_to_string(&trace).unwrap();
    let checked = check(&log, &values).unwrap_or_else(|e| panic!("{e}"));
    let calls = parse(&log);
    let rocksdb_wal =
        |c: &Call| String::from_utf8_lossy(&unescape(&c.fd)).trim_end_matches('>').ends_with(".log");
    let last = values.last().unwrap().as_bytes();
    let applied = calls
        .iter()
        .filter(|c| rocksdb_wal(c) && contains(&c.data, last))
        .map(|c| c.exit)
        .max()
        .expect("the last value applied through RocksDB's WAL");
    assert!(
        calls.iter().any(|c| rocksdb_wal(c)
            && matches!(c.name.as_str(), "fdatasync" | "fsync")
            && c.entry > applied
            && c.result == 0),
        "RocksDB's WAL was not synced within 500 ms of the last apply"
    );

    // The checker catches an answer written before its fsync returned: the same log with
    // every fsync's return moved to the end must fail.
    let (syncs, rest): (Vec<&str>, Vec<&str>) = log
        .lines()
        .partition(|l| l.contains("fdatasync(") || l.contains("fsync(") || l.contains("sync resumed>"));
    let late = rest.into_iter().chain(syncs).collect::<Vec<_>>().join("\n");
    let caught = check(&late, &values).expect_err("a trace with every fsync after the answers passed");
    eprintln!(
        "fsync trace: {PUTS} puts on one connection, {checked} traced calls: each put's WAL write was followed \
         by an fdatasync that returned 0 before the first frame of its answer was written; the same trace \
         with the fsyncs moved last fails ({caught})"
    );
}

/// Checks, for each of `values` put in turn on one connection, that the `strace` log shows the
/// request read, then the value written to the WAL, then a successful fsync of that WAL file,
/// then the answer; returns the number of calls in the log.
fn check(log: &str, values: &[String]) -> Result<usize, String> {
    let calls = parse(log);
    // The client's connection: the socket on which the first value arrived.
    let reads = |c: &&Call| matches!(c.name.as_str(), "read" | "readv" | "recvfrom" | "recvmsg");
    let writes = |c: &&Call| {
        matches!(c.name.as_str(), "write" | "writev" | "sendto" | "sendmsg" | "pwrite64" | "pwritev")
    };
    let conn = calls
        .iter()
        .filter(reads)
        .find(|c| c.fd.contains("TCP:") && contains(&c.data, values[0].as_bytes()))
        .map(|c| c.fd.clone())
        .ok_or("the first put's request is not in the trace")?;
    let incoming: Vec<&Call> = calls.iter().filter(reads).filter(|c| c.fd == conn).collect();
    let outgoing: Vec<&Call> = calls.iter().filter(writes).filter(|c| c.fd == conn).collect();
    let requests = frames(&incoming, true);
    let answers = frames(&outgoing, false);
    // The Raft log's segment; RocksDB's own WAL (`.log`) gets the applied value later, unsynced.
    let is_wal = |fd: &str| String::from_utf8_lossy(&unescape(fd)).trim_end_matches('>').ends_with(".wal");

    for value in values {
        let (stream, read) = requests
            .iter()
            .find(|f| f.0 == 0 && contains(&f.2, value.as_bytes()))
            .map(|f| (f.1, incoming[f.3].exit))
            .ok_or(format!("{value}: request not in the trace"))?;
        let wal_write = calls
            .iter()
            .filter(writes)
            .find(|c| c.entry > read && is_wal(&c.fd) && contains(&c.data, value.as_bytes()))
            .ok_or(format!("{value}: no WAL write after its request"))?;
        let sync = calls
            .iter()
            .filter(|c| c.entry > wal_write.exit && c.fd == wal_write.fd)
            .find(|c| matches!(c.name.as_str(), "fdatasync" | "fsync"))
            .ok_or(format!("{value}: its WAL write was never synced"))?;
        if sync.result != 0 {
            return Err(format!("{value}: {} failed", sync.name));
        }
        let answer = answers
            .iter()
            .find(|f| f.1 == stream && (f.0 == 0 || f.0 == 1))
            .map(|f| outgoing[f.3].entry)
            .ok_or(format!("{value}: no answer on stream {stream}"))?;
        if answer < sync.exit {
            return Err(format!(
                "{value}: the answer (trace line {answer}) was written before {} returned (line {})",
                sync.name, sync.exit
            ));
        }
    }
    Ok(calls.len())
}
