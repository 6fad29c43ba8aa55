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

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    use super::{apply, parse_origin, Cors};

    /// One path behind the middleware; what `method` on `path` from `origin` is answered with:
    /// its status and Access-Control-Allow-Origin.
    async fn ask(
        entries: &[&str],
        method: &str,
        path: &str,
        origin: Option<&str>,
    ) -> (StatusCode, Option<String>) {
        let cors = Cors::new(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>());
        let app = Router::new()
            .route("/v3/kv/range", get(|| async { "answered" }))
            .layer(axum::middleware::from_fn_with_state(cors, apply));
        let mut request = Request::builder().method(method).uri(path);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = app.oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
        let allowed =
            response.headers().get("access-control-allow-origin").map(|v| v.to_str().unwrap().to_owned());
        (response.status(), allowed)
    }

    /// etcd's OriginAllowed: empty or `*` lets any origin read with `*`; a list gives a listed
    /// origin itself back and anyone else no header, though the answer still goes out.
    #[tokio::test]
    async fn origins_are_allowed_as_etcd_allows_them() {
        let any = Some("*".to_owned());
        assert_eq!(ask(&[], "GET", "/v3/kv/range", Some("http://a:1")).await, (StatusCode::OK, any.clone()));
        assert_eq!(ask(&["*"], "GET", "/v3/kv/range", None).await, (StatusCode::OK, any.clone()));
        assert_eq!(ask(&["http://b:2", "*"], "GET", "/v3/kv/range", None).await, (StatusCode::OK, any));
        let listed = ["http://a:1", "https://b:2"];
        assert_eq!(
            ask(&listed, "GET", "/v3/kv/range", Some("https://b:2")).await,
            (StatusCode::OK, Some("https://b:2".to_owned()))
        );
        assert_eq!(ask(&listed, "GET", "/v3/kv/range", Some("http://evil:1")).await, (StatusCode::OK, None));
        assert_eq!(ask(&listed, "GET", "/v3/kv/range", None).await, (StatusCode::OK, None));
    }

    /// A preflight is answered at once, whatever the path, and never reaches a route.
    #[tokio::test]
    async fn a_preflight_is_answered_on_any_path() {
        assert_eq!(
            ask(&[], "OPTIONS", "/no/such/path", Some("http://a:1")).await,
            (StatusCode::OK, Some("*".into()))
        );
        assert_eq!(ask(&[], "GET", "/no/such/path", None).await.0, StatusCode::NOT_FOUND);
    }

    /// `--cors` entries as etcd's flag checks them, in its words.
    #[test]
    fn entries_are_urls_without_paths_or_a_star() {
        for good in ["*", "", "http://a:1", "https://10.0.0.1:2379"] {
            assert_eq!(parse_origin(good).as_deref(), Ok(good));
        }
        assert_eq!(
            parse_origin("ftp://a:1"),
            Err("URL scheme must be http, https, unix, or unixs: ftp://a:1".into())
        );
        assert_eq!(parse_origin("a:1"), Err("URL scheme must be http, https, unix, or unixs: a:1".into()));
        assert_eq!(parse_origin("http://a:1/p"), Err("URL must not contain a path: http://a:1/p".into()));
        for no_port in ["http://a", "http://a:", "http://a:x1"] {
            assert_eq!(
                parse_origin(no_port),
                Err(format!("URL address does not have the form \"host:port\": {no_port}"))
            );
        }
    }
}
