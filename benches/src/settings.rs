//! The flags every command takes (etcd benchmark's global flags, plus the bounds that keep a run
//! from hanging), checked into the [`Settings`] a command runs with: endpoints as URIs, counts
//! above zero, bounds above zero.

use actcd_proto::go_duration::parse as parse_go_duration;
use clap::{ArgAction, Args};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

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
    /// Verify certificates of TLS-enabled secure servers using this CA bundle.
    #[arg(long = "cacert", id = "tls_cacert", global = true)]
    pub cacert: Option<PathBuf>,
    /// Identify secure client using this TLS certificate file.
    #[arg(long = "cert", id = "tls_cert", global = true)]
    pub cert: Option<PathBuf>,
    /// Identify secure client using this TLS key file (range's KEY argument is another thing).
    #[arg(long = "key", id = "tls_key", global = true)]
    pub key: Option<PathBuf>,
    /// Provide username:password: each connection authenticates and its requests carry the
    /// token (etcd's benchmark prompts for a missing password; a benchmark run cannot).
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// TLS for https endpoints (None: plain only), from --cacert, --cert and --key.
    #[arg(skip)]
    pub tls: Option<ClientTlsConfig>,
    /// `--user` split into name and password.
    #[arg(skip)]
    pub credentials: Option<(String, String)>,
}

/// The global flags as [`Global::settings`] checked them.
pub type Settings = Global;

impl Global {
    /// The settings with the endpoints as URIs, the TLS config and the credentials filled in.
    pub fn settings(&self) -> Result<Settings, String> {
        for (flag, n) in [("--conns", self.conns), ("--clients", self.clients)] {
            if n == 0 {
                return Err(format!("{flag} must be at least 1"));
            }
        }
        for (flag, d) in [
            ("--dial-timeout", self.dial_timeout),
            ("--request-timeout", self.request_timeout),
            ("--stall-timeout", self.stall_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("{flag} must be above 0"));
            }
        }
        if self.endpoints.is_empty() {
            return Err("--endpoints is empty".to_string());
        }
        let endpoints = self.endpoints.iter().map(|e| endpoint_uri(e)).collect::<Result<Vec<_>, _>>()?;
        let tls = self.tls(&endpoints)?;
        let credentials = match self.user.as_deref().map(|u| u.split_once(':')) {
            None => None,
            Some(Some((name, password))) => Some((name.to_string(), password.to_string())),
            Some(None) => return Err("--user needs username:password (no prompt in a benchmark run)".into()),
        };
        Ok(Settings { endpoints, tls, credentials, ..self.clone() })
    }

    /// The TLS of https endpoints: the CA that signs the server's certificate, and the client's
    /// own certificate when the server asks for one.
    fn tls(&self, endpoints: &[String]) -> Result<Option<ClientTlsConfig>, String> {
        let read = |flag: &str, path: &Path| {
            std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
        };
        if !endpoints.iter().any(|e| e.starts_with("https://")) {
            if self.cacert.is_some() || self.cert.is_some() || self.key.is_some() {
                return Err("--cacert/--cert/--key need an https:// endpoint".to_string());
            }
            return Ok(None);
        }
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &self.cacert {
            config = config.ca_certificate(Certificate::from_pem(read("--cacert", ca)?));
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(read("--cert", cert)?, read("--key", key)?));
            }
            (None, None) => {}
            _ => return Err("--cert and --key must be given together".to_string()),
        }
        Ok(Some(config))
    }
}

/// An endpoint as a URI: `127.0.0.1:2379` becomes `http://127.0.0.1:2379`.
pub fn endpoint_uri(endpoint: &str) -> Result<String, String> {
    let endpoint = endpoint.trim();
    match endpoint.split_once("://") {
        _ if endpoint.is_empty() => Err("empty endpoint in --endpoints".to_string()),
        None => Ok(format!("http://{endpoint}")),
        Some(("http" | "https", _)) => Ok(endpoint.to_string()),
        Some((other, _)) => Err(format!(
            "endpoint {endpoint}: unsupported scheme {other:?}; use host:port or http://host:port"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_take_optional_scheme() {
        assert_eq!(endpoint_uri("127.0.0.1:2379").as_deref(), Ok("http://127.0.0.1:2379"));
        assert_eq!(endpoint_uri(" http://localhost:23790 ").as_deref(), Ok("http://localhost:23790"));
        assert_eq!(endpoint_uri("https://x:1").as_deref(), Ok("https://x:1"));
        for bad in ["unixs://x:1", "", "ftp://x:1"] {
            assert!(endpoint_uri(bad).is_err(), "{bad}");
        }
    }
}
