//! `range key [end]`: the same Range request `--total` times, linearizable or serializable, with
//! `--limit`, `--count-only`, `--keys-only` and `--prefix`; with `--stream`, as RangeStream
//! (etcd 3.7), each stream read to its end.

use crate::conn::{channel_for, connect, kv_client, Conn};
use crate::output::Out;
use crate::runner::{run_report, OpError, Plan, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::RangeRequest;
use actcd_proto::key_range::prefix_end;
use bytes::Bytes;
use clap::{ArgAction, Args};
use std::future::Future;

/// `range key [end]`'s flags.
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
    /// Use RangeStream instead of unary Range.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub stream: bool,
}

impl RangeArgs {
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        serializable(&self.consistency)?;
        if self.prefix && self.end.is_some() {
            return Err("--prefix and an end key cannot be combined".to_string());
        }
        if self.limit < 0 {
            return Err(format!("--limit must not be negative, got {}", self.limit));
        }
        Ok(())
    }

    /// Runs `range`.
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let Some(req) = stop.check(request(&a)) else { return };
        let banner = if req.serializable {
            "bench with serializable range\n"
        } else {
            "bench with linearizable range\n"
        };
        out.print(banner);
        let Some(channels) = connect(settings, stop, out, &["range"]).await else {
            return;
        };
        let workers: Vec<RangeWorker> = (0..settings.clients)
            .map(|c| RangeWorker {
                kv: kv_client(channel_for(&channels, c)),
                req: req.clone(),
                stream: a.stream,
            })
            .collect();
        run_report(settings, stop, out, "range", Plan::new(a.total, a.rate), workers, "").await;
    }
}

/// The `--consistency` flag: `l` (linearizable) or `s` (serializable); true for serializable.
pub fn serializable(consistency: &str) -> Result<bool, String> {
    match consistency {
        "l" => Ok(false),
        "s" => Ok(true),
        other => Err(format!("--consistency must be l (linearizable) or s (serializable), got {other:?}")),
    }
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
    kv: KvClient<Conn>,
    req: RangeRequest,
    stream: bool,
}

impl Worker for RangeWorker {
    fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let req = self.req.clone();
        (0, async move {
            if !self.stream {
                return self.kv.range(req).await.map(|_| ()).map_err(OpError::from);
            }
            // Each chunk is dropped as it arrives: the request is done at the stream's end.
            let mut chunks = self.kv.range_stream(req).await.map_err(OpError::from)?.into_inner();
            while chunks.message().await.map_err(OpError::from)?.is_some() {}
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `range`'s flags alone, as the command line parses them.
    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        range: RangeArgs,
    }

    fn parse(args: &[&str]) -> RangeArgs {
        Line::try_parse_from(args).expect("parses").range
    }

    #[test]
    fn prefix_flag_sets_range_end() {
        let a = parse(&["range", "--prefix", "foo", "--consistency", "s"]);
        let r = request(&a).expect("valid");
        assert_eq!(&r.key[..], b"foo");
        assert_eq!(&r.range_end[..], b"fop");
        assert!(r.serializable);
        let a = parse(&["range", "a", "z", "--limit", "5"]);
        let r = request(&a).expect("valid");
        assert_eq!(&r.range_end[..], b"z");
        assert_eq!(r.limit, 5);
        assert!(!a.stream);
        assert!(parse(&["range", "--stream", "a"]).stream);
    }

    #[test]
    fn bad_combinations_are_refused() {
        let a = parse(&["range", "--prefix", "a", "b"]);
        assert!(a.validate().is_err());
        let a = parse(&["range", "a", "--consistency", "x"]);
        assert!(a.validate().is_err());
        assert!(Line::try_parse_from(["range"]).is_err());
    }

    #[test]
    fn consistency_is_l_or_s() {
        assert_eq!(serializable("l"), Ok(false));
        assert_eq!(serializable("s"), Ok(true));
        assert!(serializable("x").is_err());
    }
}
