//! Endpoints and connections: one tonic `Channel` (one HTTP/2 connection) per `--conns`, spread
//! round-robin over `--endpoints`, each dialed under `--dial-timeout`, with clients spread
//! round-robin over the connections; with `--user`, each connection authenticates once and
//! every request carries the token (as clientv3 does); and the error texts that the error
//! distribution counts.

use crate::output::Out;
use crate::report::Recorder;
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::auth_client::AuthClient;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::watch_client::WatchClient;
use actcd_proto::etcdserverpb::{AuthenticateRequest, StatusRequest};
use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

/// Largest response the client accepts (etcd's client allows up to 2 GiB).
pub const MAX_RESPONSE: usize = i32::MAX as usize;

/// A connection as the commands use it: a channel whose requests carry the auth token, if any.
pub type Conn = InterceptedService<Channel, Token>;

/// The auth token every request of a connection carries (`--user`), in the `token` metadata
/// etcd reads.
#[derive(Clone, Default)]
pub struct Token(Option<AsciiMetadataValue>);

impl Interceptor for Token {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert("token", token.clone());
        }
        Ok(request)
    }
}

pub fn plain(channel: Channel) -> Conn {
    InterceptedService::new(channel, Token::default())
}

pub fn kv_client(conn: Conn) -> KvClient<Conn> {
    KvClient::new(conn).max_decoding_message_size(MAX_RESPONSE)
}

pub fn watch_client(conn: Conn) -> WatchClient<Conn> {
    WatchClient::new(conn).max_decoding_message_size(MAX_RESPONSE)
}

/// Why a request failed, as the error distribution shows it.
#[derive(Debug, Clone)]
pub struct OpError {
    pub text: String,
    /// The server will never serve this request (UNIMPLEMENTED): stop the run.
    pub fatal: bool,
}

impl OpError {
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into(), fatal: false }
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<Status> for OpError {
    fn from(s: Status) -> Self {
        Self { text: status_text(&s), fatal: s.code() == Code::Unimplemented }
    }
}

impl From<String> for OpError {
    fn from(text: String) -> Self {
        Self::new(text)
    }
}

impl From<OpError> for String {
    fn from(e: OpError) -> String {
        e.text
    }
}

pub async fn bounded<T, E: Into<OpError>>(
    bound: Duration,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, OpError> {
    match tokio::time::timeout(bound, call).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => Err(OpError::new(format!("request timed out after {bound:?} (--request-timeout)"))),
    }
}

/// Texts joined with `: `, leaving out one that another repeats (tonic's and hyper's errors
/// often wrap an error that says the same).
fn join_causes(texts: impl IntoIterator<Item = String>) -> String {
    let mut out: Vec<String> = Vec::new();
    for t in texts {
        if t.is_empty() || out.iter().any(|o| o.contains(&t)) {
            continue;
        }
        out.retain(|o| !t.contains(o.as_str()));
        out.push(t);
    }
    out.join(": ")
}

fn causes<'a>(err: Option<&'a (dyn StdError + 'static)>) -> impl Iterator<Item = String> + 'a {
    std::iter::successors(err, |&e| e.source()).map(|e| e.to_string())
}

pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    join_causes(causes(Some(err)))
}

/// A gRPC status as Go's grpc prints it (`rpc error: code = Unavailable desc = ...`), with the
/// transport cause when tonic has one.
pub fn status_text(status: &Status) -> String {
    let texts = std::iter::once(status.message().to_string()).chain(causes(status.source()));
    format!("rpc error: code = {:?} desc = {}", status.code(), join_causes(texts))
}

/// Whether a status says the request never reached a gRPC server (refused, reset, not an
/// HTTP/2 peer), as opposed to an answer from one.
fn is_transport_failure(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable => true,
        Code::Unknown => status.source().is_some() || status.message().contains("transport error"),
        _ => false,
    }
}

/// Dials `conns` connections (connection `i` to endpoint `i mod endpoints`), each within
/// `--dial-timeout` (TCP connect and HTTP/2 handshake), then with `--user` authenticates each
/// within `--request-timeout`. The connections, or every failure.
pub async fn dial(settings: &Settings, conns: usize) -> Result<Vec<Conn>, Vec<String>> {
    let attempts = (0..conns).map(|i| dial_to(settings, endpoint_for(&settings.endpoints, i)));
    let (ok, failed): (Vec<_>, Vec<_>) =
        futures::future::join_all(attempts).await.into_iter().partition(Result::is_ok);
    if failed.is_empty() {
        Ok(ok.into_iter().flatten().collect())
    } else {
        Err(failed.into_iter().filter_map(Result::err).collect())
    }
}

fn endpoint_for(uris: &[String], conn: usize) -> &str {
    &uris[conn % uris.len()]
}

async fn dial_to(settings: &Settings, uri: &str) -> Result<Conn, String> {
    let fail = |error: String| format!("cannot connect to {uri}: {error}");
    let dial_timeout = settings.dial_timeout;
    let mut endpoint = Endpoint::from_shared(uri.to_string())
        .map_err(|e| fail(error_chain(&e)))?
        .connect_timeout(dial_timeout)
        .tcp_nodelay(true);
    if let (Some(tls), true) = (&settings.tls, uri.starts_with("https://")) {
        endpoint = endpoint.tls_config(tls.clone()).map_err(|e| fail(error_chain(&e)))?;
    }
    let connected = async {
        let channel = endpoint.connect().await.map_err(|e| error_chain(&e))?;
        // tonic connects without waiting for the peer's HTTP/2 settings; one cheap call (Status)
        // proves a gRPC server answers. Any gRPC answer will do, even an error status: only a
        // transport failure means unreachable.
        match MaintenanceClient::new(channel.clone()).status(StatusRequest {}).await {
            Err(s) if is_transport_failure(&s) => Err(status_text(&s)),
            _ => Ok(channel),
        }
    };
    let channel = tokio::time::timeout(dial_timeout, connected)
        .await
        .map_err(|_| fail(format!("no gRPC answer within {dial_timeout:?} (--dial-timeout)")))?
        .map_err(fail)?;
    // Authenticating is a request, not part of connecting: the server checks a bcrypt hash on
    // purpose slowly (tens of ms, a few at a time), so 100 connections authenticating at once
    // take seconds, more than a dial timeout allows.
    let Some((name, password)) = &settings.credentials else { return Ok(plain(channel)) };
    let request = AuthenticateRequest { name: name.clone(), password: password.clone() };
    let answer = bounded(settings.request_timeout, AuthClient::new(channel.clone()).authenticate(request))
        .await
        .map_err(|e| fail(e.text))?;
    let token = AsciiMetadataValue::try_from(answer.into_inner().token)
        .map_err(|e| fail(format!("the server's auth token is no metadata value: {e}")))?;
    Ok(InterceptedService::new(channel, Token(Some(token))))
}

/// Dials every connection of a command. When any fails, prints what a report of nothing
/// completed looks like (each failed connection counted in the error distribution of `reports`),
/// stops the run with the reason, and returns `None`.
pub async fn connect(settings: &Settings, stop: &Stop, out: &Out, reports: &[&str]) -> Option<Vec<Conn>> {
    let errors = match dial(settings, settings.conns).await {
        Ok(channels) => return Some(channels),
        Err(errors) => errors,
    };
    for name in reports {
        let rec = Recorder::new(*name, false);
        errors.iter().for_each(|e| rec.err(e));
        out.report("", rec.stats(Duration::ZERO), "\n");
    }
    stop.stop(format!("{} ({} of {} connections failed)", errors[0], errors.len(), settings.conns));
    None
}

/// One connection, for a command's own requests beside its load; the first dial error.
pub async fn dial_one(settings: &Settings) -> Result<Conn, String> {
    Ok(dial(settings, 1).await.map_err(|e| e[0].clone())?.remove(0))
}

/// The connection client `client` uses: clients go round-robin over connections.
pub fn channel_for(channels: &[Conn], client: usize) -> Conn {
    channels[client % channels.len()].clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_like_go_grpc() {
        let e = OpError::from(Status::unimplemented("unknown service etcdserverpb.Watch"));
        assert_eq!(e.text, "rpc error: code = Unimplemented desc = unknown service etcdserverpb.Watch");
        assert!(e.fatal && !OpError::from(Status::unavailable("x")).fatal);
        assert!(is_transport_failure(&Status::unavailable("x")));
        assert!(!is_transport_failure(&Status::unimplemented("x")));
    }

    #[test]
    fn causes_are_not_repeated() {
        let t = |v: &[&str]| join_causes(v.iter().map(|s| s.to_string()));
        assert_eq!(
            t(&["tcp connect error", "transport error", "tcp connect error", "refused"]),
            "tcp connect error: transport error: refused"
        );
        assert_eq!(t(&["a", "a: b"]), "a: b");
        assert_eq!(t(&["x", ""]), "x");
    }

    #[test]
    fn conns_round_robin_over_endpoints() {
        let uris = vec!["a".to_string(), "b".to_string()];
        assert_eq!((endpoint_for(&uris, 0), endpoint_for(&uris, 3)), ("a", "b"));
    }
}
