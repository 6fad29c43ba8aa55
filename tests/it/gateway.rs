//! etcd's JSON gateway: one scripted session of curl-style HTTP/1.1 POSTs sent to Debian's
//! etcd 3.4 and to actcd, the answers compared field by field (status, and the JSON with the
//! member's identity and the lease ids left out): KV, Txn, Compact, leases and their 3.4
//! aliases, alarms, Lock, Election, the /v3beta alias, and the errors (codes, texts, HTTP
//! statuses, 404 and 405).

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{self, on_etcd_then_actcd, unchunk, Server};

/// One HTTP/1.1 request: (status, body).
async fn http(method: &str, address: &str, path: &str, body: &str) -> (u16, String) {
    let answer = harness::http(method, address, path, body).await;
    (answer.status, answer.body)
}

/// What is the same on any server given the same requests: the member's identity and the
/// term go, lease ids become their order of appearance.
fn normalized(mut value: Value, leases: &mut Vec<String>) -> Value {
    fn walk(value: &mut Value, leases: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for field in ["cluster_id", "member_id", "raft_term"] {
                    map.remove(field);
                }
                // A lease's remaining TTL depends on when the second ticked over.
                if map.contains_key("grantedTTL") {
                    map.remove("TTL");
                }
                for (name, v) in map.iter_mut() {
                    if (name == "ID" || name == "lease") && v.is_string() {
                        let id = v.as_str().unwrap_or_default().to_string();
                        let n = leases.iter().position(|l| *l == id).unwrap_or_else(|| {
                            leases.push(id.clone());
                            leases.len() - 1
                        });
                        *v = Value::String(format!("lease{n}"));
                    } else {
                        walk(v, leases);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, leases)),
            _ => {}
        }
    }
    walk(&mut value, leases);
    value
}

/// Fails naming every step of a session whose status or body differs between the two servers.
fn assert_same_answers(on_etcd: &[(String, u16, Value)], on_actcd: &[(String, u16, Value)]) {
    let mut differences = Vec::new();
    for ((step, etcd_status, etcd_body), (_, actcd_status, actcd_body)) in on_etcd.iter().zip(on_actcd) {
        if (etcd_status, etcd_body) != (actcd_status, actcd_body) {
            differences.push(format!(
                "{step}\n  etcd:  {etcd_status} {etcd_body}\n  actcd: {actcd_status} {actcd_body}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// The scripted session's answers on `server`.
async fn session(server: &Server) -> Vec<(String, u16, Value)> {
    let address = server.address.clone();
    let mut leases = Vec::new();
    let mut answers = Vec::new();
    let steps: Vec<(&str, &str, String)> = vec![
        ("POST", "/v3/kv/put", r#"{"key":"Zm9v","value":"YmFy"}"#.into()),
        ("POST", "/v3/kv/put", r#"{"key":"Zm9v","value":"YmF6","prev_kv":true}"#.into()),
        ("POST", "/v3/kv/put", r#"{"key":"Zm9w","value":"cXV4"}"#.into()),
        ("POST", "/v3/kv/range", r#"{"key":"Zm9v"}"#.into()),
        ("POST", "/v3/kv/range", r#"{"key":"Zg==","range_end":"Zw==","sort_order":"DESCEND","sort_target":"KEY","limit":"1"}"#.into()),
        ("POST", "/v3/kv/range", r#"{"key":"Zm9v","revision":"2","keys_only":true,"bogus":1}"#.into()),
        ("POST", "/v3/kv/range", r#"{"key":"AA==","range_end":"AA==","count_only":true}"#.into()),
        ("POST", "/v3beta/kv/range", r#"{"key":"Zm9v","serializable":true}"#.into()),
        ("POST", "/v3/kv/txn", r#"{"compare":[{"key":"Zm9v","result":"EQUAL","target":"VALUE","value":"YmF6"}],"success":[{"request_range":{"key":"Zm9v"}},{"request_put":{"key":"dA==","value":"MQ=="}}],"failure":[{"request_delete_range":{"key":"Zm9v"}}]}"#.into()),
        ("POST", "/v3/kv/txn", r#"{"compare":[{"key":"Zm9v","target":"MOD","result":"LESS","mod_revision":"2"}],"failure":[{"request_range":{"key":"dA=="}}]}"#.into()),
        ("POST", "/v3/kv/deleterange", r#"{"key":"dA==","prev_kv":true}"#.into()),
        ("POST", "/v3/kv/range", r#"{"key":""}"#.into()),
        ("POST", "/v3/kv/compaction", r#"{"revision":"100"}"#.into()),
        ("POST", "/v3/kv/compaction", r#"{"revision":"2"}"#.into()),
        ("POST", "/v3/kv/range", r#"{"key":"Zm9v","revision":"1"}"#.into()),
        ("POST", "/v3/lease/grant", r#"{"TTL":"30"}"#.into()),
        ("POST", "/v3/lease/grant", r#"{"TTL":"40","ID":"1234"}"#.into()),
        ("POST", "/v3/lease/grant", r#"{"TTL":"40","ID":"1234"}"#.into()),
        ("POST", "/v3/kv/put", r#"{"key":"bA==","value":"dg==","lease":"1234"}"#.into()),
        ("POST", "/v3/kv/lease/timetolive", r#"{"ID":"1234","keys":true}"#.into()),
        ("POST", "/v3/lease/keepalive", r#"{"ID":"1234"}"#.into()),
        ("POST", "/v3/lease/keepalive", r#"{"ID":"999"}"#.into()),
        ("POST", "/v3/lease/revoke", r#"{"ID":"1234"}"#.into()),
        ("POST", "/v3/kv/lease/revoke", r#"{"ID":"1234"}"#.into()),
        ("POST", "/v3/kv/range", r#"{"key":"bA=="}"#.into()),
        ("POST", "/v3/maintenance/alarm", r#"{"action":"GET"}"#.into()),
        ("POST", "/v3/auth/authenticate", r#"{"name":"root","password":"x"}"#.into()),
        ("POST", "/v3/lock/lock", r#"{"name":"bG9jaw==","lease":"5678"}"#.into()),
        ("POST", "/v3/election/leader", r#"{"name":"ZQ=="}"#.into()),
        ("POST", "/v3/election/proclaim", r#"{"value":"eA=="}"#.into()),
        ("GET", "/v3/kv/range", String::new()),
        ("POST", "/v3/nothing", "{}".into()),
        ("POST", "/v3/kv/range", String::new()),
    ];
    for (method, path, body) in steps {
        let (status, text) = http(method, &address, path, &body).await;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        answers.push((format!("{method} {path} {body}"), status, normalized(value, &mut leases)));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_session_answers_as_etcd_3_4s_gateway() {
    let (on_etcd, on_actcd) = on_etcd_then_actcd(&[], &[], session).await;
    assert_same_answers(&on_etcd, &on_actcd);
    // The session says something: the put answered, an error came back as etcd's JSON.
    assert!(on_etcd[3].2["kvs"][0]["value"] == "YmF6", "{:?}", on_etcd[3]);
    assert_eq!(on_etcd[11].1, 400);
}

/// A gateway body that is no JSON, or names a wrong type, gets code 3 (InvalidArgument) and
/// HTTP 400, as on etcd (the text is serde's, not Go's); a request over --max-request-bytes
/// gets gRPC's ResourceExhausted, 429.
#[tokio::test]
async fn bad_gateway_bodies_get_etcds_codes() {
    let server = Server::temp_actcd(&["--max-request-bytes", "1024"]).await;
    for body in [r#"{"key":"#, r#"{"key":5}"#, r#"[1,2]"#, r#"{"key":"not base64!"}"#] {
        let (status, text) = http("POST", &server.address, "/v3/kv/range", body).await;
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!((status, value["code"].as_i64()), (400, Some(3)), "{body}: {text}");
        assert_eq!(value["error"], value["message"], "{text}");
    }
    let big = format!(r#"{{"key":"Zm9v","value":"{}"}}"#, "QUFB".repeat(400));
    let (status, text) = http("POST", &server.address, "/v3/kv/put", &big).await;
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!((status, value["code"].as_i64()), (429, Some(8)), "{text}");
    assert!(
        value["message"].as_str().unwrap().starts_with("grpc: received message larger than max ("),
        "{text}"
    );
    let huge = "x".repeat(8 * 1024 * 1024);
    let (status, _) = http("POST", &server.address, "/v3/kv/put", &huge).await;
    assert_eq!(status, 429, "a body far over the limit is refused unread");
}

/// The JSON lines of a streaming gateway call, read until `count` arrived (or 20 s passed).
async fn stream_lines(
    address: &str,
    path: &str,
    body: &str,
    count: usize,
) -> (tokio::net::TcpStream, Vec<String>) {
    let mut stream = open_stream(address, path, body).await;
    let lines = read_lines(&mut stream, &mut Vec::new(), path, count).await;
    (stream, lines)
}

/// A streaming POST of `body` to `path`, its answer not yet read.
async fn open_stream(address: &str, path: &str, body: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Reads `stream`'s answer into `text` (what came so far, kept between calls) until its body
/// holds `count` lines, and returns them.
async fn read_lines(
    stream: &mut tokio::net::TcpStream,
    text: &mut Vec<u8>,
    path: &str,
    count: usize,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let whole = String::from_utf8_lossy(text).into_owned();
        if let Some((_, body)) = whole.split_once("\r\n\r\n") {
            let lines: Vec<String> = unchunk(body).lines().map(str::to_string).collect();
            if lines.len() >= count {
                return lines;
            }
        }
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => text.extend_from_slice(&buf[..n]),
            _ => panic!("{count} lines from {path}, got {whole}"),
        }
    }
}

/// A watch over the gateway sees what etcd's gateway shows: the created line, a put with its
/// prev_kv, a delete, each wrapped in `{"result": ...}`; a bad first object is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_watch_streams_as_etcds() {
    async fn watched(server: &Server) -> Vec<Value> {
        let address = server.address.clone();
        http("POST", &address, "/v3/kv/put", r#"{"key":"Zm9v","value":"YmFy"}"#).await;
        let create = r#"{"create_request":{"key":"Zm9v","prev_kv":true}}"#;
        let mut watch = open_stream(&address, "/v3/watch", create).await;
        let mut text = Vec::new();
        // The writes go after the created line: a watch without a start revision sees only
        // what comes after it is created.
        read_lines(&mut watch, &mut text, "/v3/watch", 1).await;
        http("POST", &address, "/v3/kv/put", r#"{"key":"Zm9v","value":"MQ=="}"#).await;
        http("POST", &address, "/v3/kv/deleterange", r#"{"key":"Zm9v"}"#).await;
        let lines = read_lines(&mut watch, &mut text, "/v3/watch", 3).await;
        let mut leases = Vec::new();
        let mut values: Vec<Value> =
            lines.iter().map(|l| normalized(serde_json::from_str(l).unwrap(), &mut leases)).collect();
        // A replay from revision 1 in one answer, and a refused first object.
        let (_stream, replay) = stream_lines(
            &address,
            "/v3/watch",
            r#"{"create_request":{"key":"Zm9v","start_revision":"1"}}"#,
            2,
        )
        .await;
        values.extend(replay.iter().map(|l| normalized(serde_json::from_str(l).unwrap(), &mut leases)));
        let (status, text) = http("POST", &address, "/v3/watch", r#"{"create_request":{"key":5}}"#).await;
        let refused: Value = serde_json::from_str(&text).unwrap();
        values.push(serde_json::json!({ "status": status, "code": refused["code"] }));
        values
    }
    let (on_etcd, on_actcd) = on_etcd_then_actcd(&[], &[], watched).await;
    assert_eq!(on_actcd, on_etcd);
    assert_eq!(on_etcd[2]["result"]["events"][0]["type"], "DELETE", "{on_etcd:#?}");
}

/// Auth over the gateway as etcd 3.4 takes it: users and roles set up through /v3/auth/*,
/// the token from /v3/auth/authenticate sent back in the Authorization header, and every
/// path checked as gRPC is (no token, a bad token, a user without the permission).
async fn auth_session(server: &Server) -> Vec<(String, u16, Value)> {
    // (path, body, whose token to send, whose token the answer carries)
    let steps: [(&str, &str, Option<&str>, Option<&str>); 18] = [
        ("/v3/auth/user/add", r#"{"name":"root","password":"rootpw"}"#, None, None),
        ("/v3/auth/role/add", r#"{"name":"root"}"#, None, None),
        ("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#, None, None),
        ("/v3/auth/user/add", r#"{"name":"alice","password":"alicepw"}"#, None, None),
        ("/v3/auth/role/add", r#"{"name":"reader"}"#, None, None),
        (
            "/v3/auth/role/grant",
            r#"{"name":"reader","perm":{"permType":"READ","key":"YQ==","range_end":"Yg=="}}"#,
            None,
            None,
        ),
        ("/v3/auth/user/grant", r#"{"user":"alice","role":"reader"}"#, None, None),
        ("/v3/auth/enable", "{}", None, None),
        ("/v3/kv/put", r#"{"key":"YQ==","value":"MQ=="}"#, None, None),
        ("/v3/auth/authenticate", r#"{"name":"root","password":"wrong"}"#, None, None),
        ("/v3/auth/authenticate", r#"{"name":"root","password":"rootpw"}"#, None, Some("root")),
        ("/v3/kv/put", r#"{"key":"YQ==","value":"MQ=="}"#, Some("root"), None),
        ("/v3/kv/put", r#"{"key":"YQ==","value":"MQ=="}"#, Some("bogus"), None),
        ("/v3/auth/authenticate", r#"{"name":"alice","password":"alicepw"}"#, None, Some("alice")),
        ("/v3/kv/range", r#"{"key":"YQ=="}"#, Some("alice"), None),
        ("/v3/kv/put", r#"{"key":"YQ==","value":"Mg=="}"#, Some("alice"), None),
        ("/v3/auth/user/list", "{}", Some("alice"), None),
        ("/v3/auth/disable", "{}", Some("root"), None),
    ];
    let mut tokens = std::collections::HashMap::from([("bogus", "bogus.1".to_string())]);
    let mut answers = Vec::new();
    for (path, body, send, keep) in steps {
        let token = send.map(|who| tokens[who].clone());
        let headers: Vec<(&str, &str)> = token.iter().map(|t| ("Authorization", t.as_str())).collect();
        let answer = harness::http_with("POST", &server.address, path, &headers, body).await;
        let mut value: Value = serde_json::from_str(&answer.body).unwrap_or(Value::String(answer.body));
        if let (Some(who), Some(token)) = (keep, value.get("token").and_then(Value::as_str)) {
            tokens.insert(who, token.to_string());
            value["token"] = Value::String("a token".into());
        }
        answers.push((
            format!("{path} {body} as {send:?}"),
            answer.status,
            normalized(value, &mut Vec::new()),
        ));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_over_the_gateway_answers_as_etcds() {
    let (on_etcd, on_actcd) = on_etcd_then_actcd(&[], &["--bcrypt-cost", "4"], auth_session).await;
    assert_same_answers(&on_etcd, &on_actcd);
    // The session says something: no token is refused, the root token writes, alice reads
    // and is refused a write.
    assert_ne!(on_etcd[8].1, 200, "{:?}", on_etcd[8]);
    assert_eq!(on_etcd[11].1, 200, "{:?}", on_etcd[11]);
    assert_eq!(on_etcd[14].2["kvs"][0]["value"], "MQ==", "{:?}", on_etcd[14]);
    assert_ne!(on_etcd[15].1, 200, "{:?}", on_etcd[15]);
}

/// The CORS headers and the preflight status of a few requests, as (request, status, headers).
async fn cors_answers(server: &Server) -> Vec<(String, u16, Vec<(String, String)>)> {
    let requests: [(&str, &str, Option<&str>); 5] = [
        ("POST", "/v3/kv/range", Some("http://a.example:8080")),
        ("POST", "/v3/kv/range", Some("http://b.example")),
        ("POST", "/v3/kv/range", None),
        ("OPTIONS", "/v3/kv/put", Some("http://b.example")),
        ("GET", "/health", Some("http://a.example:8080")),
    ];
    let mut answers = Vec::new();
    for (method, path, origin) in requests {
        let headers: Vec<(&str, &str)> = origin.iter().map(|o| ("Origin", *o)).collect();
        let body = if method == "POST" { r#"{"key":"YQ=="}"# } else { "" };
        let answer = harness::http_with(method, &server.address, path, &headers, body).await;
        let mut cors: Vec<(String, String)> =
            answer.headers.into_iter().filter(|(name, _)| name.starts_with("access-control-")).collect();
        cors.sort();
        answers.push((format!("{method} {path} from {origin:?}"), answer.status, cors));
    }
    answers
}

/// `--cors` as on etcd 3.4: by default every answer allows any origin; with a list, only a
/// listed Origin gets its headers; OPTIONS is answered 200 at once. A bad entry is refused
/// in etcd's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_headers_are_etcds() {
    for flags in [vec![], vec!["--cors=http://a.example:8080,https://c.example:443"]] {
        let (on_etcd, on_actcd) = on_etcd_then_actcd(&flags, &flags, cors_answers).await;
        assert_eq!(on_actcd, on_etcd, "with {flags:?}");
        let allowed =
            |i: usize| on_etcd[i].2.iter().find(|(n, _)| n == "access-control-allow-origin").cloned();
        if flags.is_empty() {
            assert_eq!(allowed(1).map(|(_, v)| v).as_deref(), Some("*"));
        } else {
            assert_eq!(allowed(0).map(|(_, v)| v).as_deref(), Some("http://a.example:8080"));
            assert_eq!(allowed(1), None, "an unlisted origin gets no CORS headers");
        }
        assert_eq!(on_etcd[3].1, 200, "a preflight is answered at once");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_actcd"))
        .arg("--cors=http://a.example")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"URL address does not have the form "host:port": http://a.example"#), "{err}");
}

/// The API table (src/grpc/api.rs) that registers the services and generates these routes names
/// only methods the protos declare.
#[test]
fn every_api_row_names_a_method_of_the_protos() {
    let paths = actcd::grpc::api::paths();
    assert!(paths.len() > 40, "only {} rows", paths.len());
    for path in paths {
        assert!(actcd_proto::services::method_of_path(&path).is_some(), "{path}");
    }
}

/// A learner serves what etcd's learner serves (Status, Range, Snapshot: etcd 3.4.28's
/// interceptors), by gRPC path and by gateway path alike, and refuses every other row.
#[test]
fn the_table_marks_what_a_learner_serves() {
    use actcd::grpc::api::{learner_serves, paths};
    let served =
        ["/etcdserverpb.KV/Range", "/etcdserverpb.Maintenance/Status", "/etcdserverpb.Maintenance/Snapshot"];
    for path in paths() {
        assert_eq!(learner_serves(&path), served.contains(&path.as_str()), "{path}");
    }
    for path in ["/kv/range", "/maintenance/status", "/maintenance/snapshot"] {
        assert!(learner_serves(path), "{path}");
    }
    for path in ["/kv/put", "/kv/txn", "/maintenance/hash", "/lease/grant", "/watch"] {
        assert!(!learner_serves(path), "{path}");
    }
}
