//! `range key [end]`: the same Range request `--total` times, linearizable or serializable, with
//! `--limit`, `--count-only`, `--keys-only` and `--prefix`.

use super::put::kv_client;
use super::{channel_for, connect, serializable};
use crate::cli::RangeArgs;
use crate::keys::prefix_end;
use crate::report::Recorder;
use crate::runner::{run_load, OpError, Out, Plan, Settings, Stop, Worker};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::RangeRequest;
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;
use tonic::transport::Channel;

/// Checks `range`'s flags.
pub fn validate(a: &RangeArgs) -> Result<(), String> {
    serializable(&a.consistency)?;
    if a.prefix && a.end.is_some() {
        return Err("--prefix and an end key cannot be combined".to_string());
    }
    if a.limit < 0 {
        return Err(format!("--limit must not be negative, got {}", a.limit));
    }
    Ok(())
}

/// The Range request `range` sends.
pub fn request(a: &RangeArgs) -> Result<RangeRequest, String> {
    let key = a.key.as_bytes().to_vec();
    let range_end =
        if a.prefix { prefix_end(&key) } else { a.end.as_deref().unwrap_or("").as_bytes().to_vec() };
    Ok(RangeRequest {
        key: Bytes::from(key),
        range_end: Bytes::from(range_end),
        limit: a.limit,
        serializable: serializable(&a.consistency)?,
        keys_only: a.keys_only,
        count_only: a.count_only,
        ..Default::default()
    })
}

struct RangeWorker {
    kv: KvClient<Channel>,
    req: RangeRequest,
}

impl Worker for RangeWorker {
    fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let req = self.req.clone();
        (0, async move { self.kv.range(req).await.map(|_| ()).map_err(OpError::from) })
    }
}

/// Runs `range`.
pub async fn run(settings: &Settings, stop: &Stop, out: &Out, a: RangeArgs) {
    let req = match request(&a) {
        Ok(r) => r,
        Err(e) => {
            stop.stop(e);
            return;
        }
    };
    let banner =
        if req.serializable { "bench with serializable range\n" } else { "bench with linearizable range\n" };
    out.print(banner);
    let Some(channels) = connect(settings, stop, out, &["range"]).await else {
        return;
    };
    let workers: Vec<RangeWorker> = (0..settings.clients)
        .map(|c| RangeWorker { kv: kv_client(channel_for(&channels, c)), req: req.clone() })
        .collect();
    let rec = Arc::new(Recorder::new("range", settings.clients, settings.sample));
    let total =
        run_load(settings, stop, Plan::new(a.total, a.rate), std::slice::from_ref(&rec), workers).await;
    out.report("", rec.stats(total), "");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> RangeArgs {
        let cli = Cli::try_parse_from(args).expect("parses");
        match cli.command {
            Command::Range(a) => a,
            other => panic!("not range: {other:?}"),
        }
    }

    #[test]
    fn prefix_flag_sets_range_end() {
        let a = parse(&["actcd-bench", "range", "--prefix", "foo", "--consistency", "s"]);
        let r = request(&a).expect("valid");
        assert_eq!(&r.key[..], b"foo");
        assert_eq!(&r.range_end[..], b"fop");
        assert!(r.serializable);
        let a = parse(&["actcd-bench", "--conns=2", "range", "a", "z", "--limit", "5"]);
        let r = request(&a).expect("valid");
        assert_eq!(&r.range_end[..], b"z");
        assert_eq!(r.limit, 5);
    }

    #[test]
    fn bad_combinations_are_refused() {
        let a = parse(&["actcd-bench", "range", "--prefix", "a", "b"]);
        assert!(validate(&a).is_err());
        let a = parse(&["actcd-bench", "range", "a", "--consistency", "x"]);
        assert!(validate(&a).is_err());
        assert!(Cli::try_parse_from(["actcd-bench", "range"]).is_err());
    }
}
