//! `--cors`, as etcd 3.4 applies it to the HTTP it serves on a client URL (the gateway,
//! /health, /version, /metrics): every answer names the origins it may be read from, and an
//! OPTIONS preflight is answered 200 at once, whatever the path.
//!
//! etcd's rule (etcdserver.AccessController.OriginAllowed): an empty list or `*` allows any
//! origin and answers `Access-Control-Allow-Origin: *`; otherwise a request whose Origin is
//! in the list gets its own origin back, and any other gets no CORS headers (its answer is
//! still sent: keeping it from the page is the browser's job).

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The origins `--cors` allows.
#[derive(Clone, Debug)]
pub struct Cors {
    /// `None`: any origin.
    origins: Option<Arc<HashSet<String>>>,
}

impl Cors {
    /// From `--cors`'s entries, each checked by [`parse_origin`] already.
    pub fn new(entries: &[String]) -> Cors {
        let entries: Vec<&String> = entries.iter().filter(|e| !e.is_empty()).collect();
        if entries.is_empty() || entries.iter().any(|e| *e == "*") {
            return Cors { origins: None };
        }
        Cors { origins: Some(Arc::new(entries.into_iter().cloned().collect())) }
    }

    /// The Access-Control-Allow-Origin an answer to a request from `origin` carries.
    fn allowed(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        match &self.origins {
            None => Some(HeaderValue::from_static("*")),
            Some(list) => origin.filter(|o| o.to_str().is_ok_and(|o| list.contains(o))).cloned(),
        }
    }
}

/// Checks one `--cors` entry as etcd's flag does: `*`, or an http(s) URL of the form
/// `scheme://host:port` with no path.
pub fn parse_origin(entry: &str) -> Result<String, String> {
    if entry == "*" || entry.is_empty() {
        return Ok(entry.to_owned());
    }
    let Some((scheme, rest)) = entry.split_once("://") else {
        return Err(format!("URL scheme must be http, https, unix, or unixs: {entry}"));
    };
    if !matches!(scheme, "http" | "https") {
        return Err(format!("URL scheme must be http, https, unix, or unixs: {entry}"));
    }
    if rest.contains('/') {
        return Err(format!("URL must not contain a path: {entry}"));
    }
    let port = rest.rsplit_once(':').map(|(_, port)| port);
    if !port.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("URL address does not have the form \"host:port\": {entry}"));
    }
    Ok(entry.to_owned())
}

/// The middleware: headers on every answer, and the preflight.
pub async fn apply(State(cors): State<Cors>, request: Request, next: Next) -> Response {
    let allow = cors.allowed(request.headers().get(axum::http::header::ORIGIN));
    let mut response = if request.method() == Method::OPTIONS {
        StatusCode::OK.into_response()
    } else {
        next.run(request).await
    };
    if let Some(origin) = allow {
        let headers = response.headers_mut();
        headers.insert(
            "access-control-allow-methods",
            HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"),
        );
        headers.insert("access-control-allow-origin", origin);
        headers.insert(
            "access-control-allow-headers",
            HeaderValue::from_static("accept, content-type, authorization"),
        );
    }
    response
}
