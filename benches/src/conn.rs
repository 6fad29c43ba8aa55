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
use actcd_proto::etcdserverpb::{AuthenticateRequest, StatusRequest};
use std::error::Error as StdError;
use std::time::Duration;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
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

/// A connection without a token.
pub fn plain(channel: Channel) -> Conn {
    InterceptedService::new(channel, Token::default())
}

/// A KV client on `conn` that accepts large responses.
pub fn kv_client(conn: Conn) -> KvClient<Conn> {
    KvClient::new(conn).max_decoding_message_size(MAX_RESPONSE)
}

/// Authenticates as `user` (name and password) on `channel`: the connection with its token.
async fn authenticate(channel: Channel, (name, password): &(String, String)) -> Result<Conn, String> {
    let request = AuthenticateRequest { name: name.clone(), password: password.clone() };
    let answer = AuthClient::new(channel.clone()).authenticate(request).await.map_err(|s| status_text(&s))?;
    let token: AsciiMetadataValue = MetadataValue::try_from(answer.into_inner().token)
        .map_err(|e| format!("the server's auth token is no metadata value: {e}"))?;
    Ok(InterceptedService::new(channel, Token(Some(token))))
}

/// An error and its causes, joined with `: `, leaving out a text that the next cause repeats
/// (tonic's and hyper's errors often wrap an error that says the same).
pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut texts = vec![err.to_string()];
    let mut source = err.source();
    while let Some(e) = source {
        texts.push(e.to_string());
        source = e.source();
    }
    join_causes(texts)
}

fn join_causes(texts: Vec<String>) -> String {
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

/// A gRPC status as Go's grpc prints it (`rpc error: code = Unavailable desc = ...`), with the
/// transport cause when tonic has one.
pub fn status_text(status: &Status) -> String {
    let mut texts = vec![status.message().to_string()];
    let mut source = status.source();
    while let Some(e) = source {
        texts.push(e.to_string());
        source = e.source();
    }
    format!("rpc error: code = {:?} desc = {}", status.code(), join_causes(texts))
}

/// Whether a status says the request never reached a gRPC server (refused, reset, not an
/// HTTP/2 peer), as opposed to an answer from one.
pub fn is_transport_failure(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable => true,
        Code::Unknown => status.source().is_some() || status.message().contains("transport error"),
        _ => false,
    }
}

/// Whether a status means the server will never serve this call (so a run stops at once rather
/// than collect the same error for every request).
pub fn is_fatal(status: &Status) -> bool {
    status.code() == Code::Unimplemented
}

/// Why dialing failed: which connection, to where, and the cause.
#[derive(Debug, Clone)]
pub struct DialError {
    /// The connection number (0-based).
    pub conn: usize,
    /// The endpoint URI.
    pub endpoint: String,
    /// The cause.
    pub error: String,
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot connect to {}: {}", self.endpoint, self.error)
    }
}

/// The endpoint of connection `conn`: connections go round-robin over the endpoints.
fn endpoint_for(uris: &[String], conn: usize) -> &str {
    &uris[conn % uris.len()]
}

/// Dials `conns` connections, each within `dial_timeout` (TCP connect and HTTP/2 handshake),
/// then with `--user` authenticates each within `request_timeout`. Returns the connections,
/// or every connection's failure.
pub async fn dial(settings: &Settings, conns: usize) -> Result<Vec<Conn>, Vec<DialError>> {
    let dial_timeout = settings.dial_timeout;
    let attempts = (0..conns).map(|conn| {
        let uri = endpoint_for(&settings.endpoints, conn).to_string();
        async move {
            let fail = |error: String| DialError { conn, endpoint: uri.clone(), error };
            let mut endpoint = Endpoint::from_shared(uri.clone())
                .map_err(|e| fail(error_chain(&e)))?
                .connect_timeout(dial_timeout)
                .tcp_nodelay(true);
            if let (Some(tls), true) = (&settings.tls, uri.starts_with("https://")) {
                endpoint = endpoint.tls_config(tls.clone()).map_err(|e| fail(error_chain(&e)))?;
            }
            let connected = async {
                let channel = endpoint.connect().await.map_err(|e| error_chain(&e))?;
                // tonic connects without waiting for the peer's HTTP/2 settings; one cheap
                // call (Status) proves a gRPC server answers. Any gRPC answer will do, even an
                // error status: only a transport failure means unreachable.
                let mut probe = MaintenanceClient::new(channel.clone());
                match probe.status(StatusRequest {}).await {
                    Err(s) if is_transport_failure(&s) => Err(status_text(&s)),
                    _ => Ok(channel),
                }
            };
            let channel = match tokio::time::timeout(dial_timeout, connected).await {
                Ok(Ok(channel)) => channel,
                Ok(Err(e)) => return Err(fail(e)),
                Err(_) => {
                    return Err(fail(format!("no gRPC answer within {:?} (--dial-timeout)", dial_timeout)))
                }
            };
            // Authenticating is a request, not part of connecting: the server checks a bcrypt
            // hash on purpose slowly (tens of ms, a few at a time), so 100 connections
            // authenticating at once take seconds, more than a dial timeout allows.
            let Some(user) = &settings.credentials else { return Ok(plain(channel)) };
            match tokio::time::timeout(settings.request_timeout, authenticate(channel, user)).await {
                Ok(Ok(conn)) => Ok(conn),
                Ok(Err(e)) => Err(fail(e)),
                Err(_) => Err(fail(format!(
                    "no Authenticate answer within {:?} (--request-timeout)",
                    settings.request_timeout
                ))),
            }
        }
    });
    let results = futures::future::join_all(attempts).await;
    let mut channels = Vec::with_capacity(conns);
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(c) => channels.push(c),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(channels)
    } else {
        Err(errors)
    }
}

/// Dials every connection of a command. When any fails, prints what a report of nothing
/// completed looks like (each failed connection counted in the error distribution of `reports`),
/// stops the run with the reason, and returns `None`.
pub async fn connect(settings: &Settings, stop: &Stop, out: &Out, reports: &[&str]) -> Option<Vec<Conn>> {
    match dial(settings, settings.conns).await {
        Ok(channels) => Some(channels),
        Err(errors) => {
            let first = errors.first().map(|e| e.to_string()).unwrap_or_else(|| "cannot connect".to_string());
            for name in reports {
                let rec = Recorder::new(*name, 1, false);
                for e in &errors {
                    rec.err(0, &e.to_string());
                }
                out.report("", rec.stats(Duration::ZERO), "\n");
            }
            stop.stop(format!("{first} ({} of {} connections failed)", errors.len(), settings.conns));
            None
        }
    }
}

/// One connection, for a command's own requests beside its load; the first dial error as text.
pub async fn dial_one(settings: &Settings) -> Result<Conn, String> {
    let mut conns =
        dial(settings, 1).await.map_err(|e| e.first().map(|e| e.to_string()).unwrap_or_default())?;
    Ok(conns.remove(0))
}

/// `call` under `bound`: its answer, or the timeout or the status as text.
pub async fn bounded<T>(
    bound: Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(bound, call).await {
        Ok(r) => r.map(tonic::Response::into_inner).map_err(|s| status_text(&s)),
        Err(_) => Err(format!("timed out after {bound:?}")),
    }
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
        let s = Status::unimplemented("unknown service etcdserverpb.Watch");
        assert_eq!(
            status_text(&s),
            "rpc error: code = Unimplemented desc = unknown service etcdserverpb.Watch"
        );
        assert!(is_fatal(&s));
        assert!(!is_fatal(&Status::unavailable("x")));
        assert!(is_transport_failure(&Status::unavailable("x")));
        assert!(!is_transport_failure(&s));
    }

    #[test]
    fn causes_are_not_repeated() {
        let t = |v: &[&str]| join_causes(v.iter().map(|s| s.to_string()).collect());
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
        assert_eq!(endpoint_for(&uris, 0), "a");
        assert_eq!(endpoint_for(&uris, 3), "b");
    }
}
