//! Helpers shared by the integration tests: the S3-compatible server that
//! `.ci/run` starts on loopback, views' states, folders copied and listed.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;

use datafusion_matview::MatviewSession;
use datafusion_matview::spec::{QualifiedName, ViewVersion};
use object_store::ObjectStore;

/// How many snapshots view `name` (in `datafusion.public`) has retired:
/// one per refresh that landed since it was created.
pub async fn retired_snapshots(s: &MatviewSession, name: &str) -> usize {
    view(s, name).await.retired.len()
}

/// The latest state of view `name` in `datafusion.public`.
pub async fn view(s: &MatviewSession, name: &str) -> Arc<ViewVersion> {
    s.catalog().reload().await.expect("the catalog reloads");
    s.catalog()
        .view(&QualifiedName::new("datafusion", "public", name))
        .await
        .expect("the view's log reads")
        .expect("the view exists")
}

/// The server's endpoint (`DFMV_TEST_S3_ENDPOINT`), or `None` when none is
/// configured: the S3 variants of the tests then skip, which CI does not
/// allow.
pub fn s3_endpoint() -> Option<String> {
    let endpoint = std::env::var("DFMV_TEST_S3_ENDPOINT").ok();
    if endpoint.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the S3 tests: set DFMV_TEST_S3_ENDPOINT (see .ci/run)"
        );
        eprintln!("DFMV_TEST_S3_ENDPOINT is not set: skipping an S3 test");
    }
    endpoint
}

/// The test bucket (`DFMV_TEST_S3_BUCKET`, default `dfmv-test`).
pub fn s3_bucket() -> String {
    std::env::var("DFMV_TEST_S3_BUCKET").unwrap_or_else(|_| "dfmv-test".into())
}

/// A store for the test bucket on the server at `endpoint`.
pub fn s3_store(endpoint: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_bucket_name(s3_bucket())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .build()
            .expect("an S3 store for the test server"),
    )
}

/// Copies folder `from` into `to` (created), files and subfolders.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// Every file under `root` (none when it does not exist), relative to it.
pub fn files_under(root: &std::path::Path) -> std::collections::BTreeSet<String> {
    fn walk(
        dir: &std::path::Path,
        root: &std::path::Path,
        out: &mut std::collections::BTreeSet<String>,
    ) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                out.insert(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out
}

/// A session over `ctx` that remembers external tables and plain views in
/// the catalog at `catalog`, as dfmv's does.
pub async fn remembering(
    ctx: datafusion::prelude::SessionContext,
    catalog: &std::path::Path,
) -> MatviewSession {
    MatviewSession::open_with_options(
        ctx,
        &catalog.display().to_string(),
        datafusion_matview::MatviewOptions {
            remember_relations: true,
            ..Default::default()
        },
    )
    .await
    .expect("the catalog opens")
}

/// The rows of `batches` as text, one line per row with the header, in
/// sorted order (table borders left out): for comparing results whose
/// row order is not defined.
pub fn sorted_text(batches: Vec<datafusion::arrow::array::RecordBatch>) -> String {
    let mut lines: Vec<String> = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .expect("batches format")
        .to_string()
        .lines()
        .filter(|l| !l.starts_with('+'))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines.join("\n")
}

/// One HTTP/1.1 request over a fresh connection: the status and the body
/// as JSON.
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    http_with(addr, method, path, &[], body)
}

/// [`http`] with `headers` in place of its own `Host` and `Content-Type`
/// (and any others): for requests as a web page would send them.
pub fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to dfmv serve");
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nAccept: application/json\r\n");
    for (name, default) in [("Host", addr), ("Content-Type", "application/json")] {
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            head.push_str(&format!("{name}: {default}\r\n"));
        }
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    write!(stream, "{head}Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, mut payload) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head[9..12].parse().unwrap();
    let decoded;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        while let Some((size, rest)) = payload.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            out.push_str(&rest[..size]);
            payload = &rest[size + 2..];
        }
        decoded = out;
        payload = &decoded;
    }
    (status, serde_json::from_str(payload).expect("a JSON body"))
}
