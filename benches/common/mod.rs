//! What the benchmarks share.

// Each bench is its own crate and uses some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use datafusion::prelude::SessionContext;
use tokio::runtime::Runtime;

/// The value of environment variable `name` as a number, else `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `samples`.
pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `dfmv --catalog <catalog> -q --format csv -c <sql>` as a new process
/// (the release `dfmv` of a bench run with feature `cli`): its output and
/// how long it took.
pub fn dfmv(catalog: &Path, sql: &str) -> (String, Duration) {
    let Some(exe) = option_env!("CARGO_BIN_EXE_dfmv") else {
        panic!("a bench of dfmv needs feature `cli`");
    };
    let started = std::time::Instant::now();
    let out = std::process::Command::new(exe)
        .arg("--catalog")
        .arg(catalog)
        .args(["-q", "--format", "csv", "-c", sql])
        .output()
        .expect("dfmv runs");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8(out.stdout).unwrap(), took)
}

/// Times `a` and `b` `samples` times each, interleaved, after one run of
/// each not timed; `check` sees every output of either. Returns the
/// medians.
pub fn compare_checked(
    samples: usize,
    a: impl Fn() -> (String, Duration),
    b: impl Fn() -> (String, Duration),
    check: impl Fn(&str),
) -> (Duration, Duration) {
    let (mut xs, mut ys) = (vec![], vec![]);
    for round in 0..=samples {
        for (side, times) in [(&a as &dyn Fn() -> _, &mut xs), (&b, &mut ys)] {
            let (out, took) = side();
            check(&out);
            if round > 0 {
                times.push(took);
            }
        }
    }
    (median(xs), median(ys))
}

/// [`compare_checked`] where both sides answer what `a` first did.
pub fn compare(
    samples: usize,
    a: impl Fn() -> (String, Duration),
    b: impl Fn() -> (String, Duration),
) -> (Duration, Duration) {
    let (expected, _) = a();
    compare_checked(samples, a, b, |out| {
        assert_eq!(out, expected, "both sides answer the same")
    })
}

/// Where criterion writes its estimates (the target directory's
/// `criterion/`).
pub fn criterion_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("criterion")
}

/// Mean time of one benchmark from criterion's estimates, in nanoseconds.
pub fn mean_ns(out: &Path, group: &str, function: &str) -> Option<f64> {
    let text = std::fs::read_to_string(
        out.join(group)
            .join(function)
            .join("new")
            .join("estimates.json"),
    )
    .ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

/// Writes a generated source of `files` Parquet files of `per_file` rows
/// each under `src`, named `part-NNN.parquet`, written by DataFusion:
/// `id` (1, 2, ...), `grp` (`id % 1000`), `amount` (`id * 7919 % 100003`),
/// and with `names` a `name` column (`name-<id % 5000>`).
pub fn write_source(rt: &Runtime, src: &Path, files: usize, per_file: usize, names: bool) {
    std::fs::create_dir_all(src).unwrap();
    let name = if names {
        ", concat('name-', CAST(value % 5000 AS VARCHAR)) AS name"
    } else {
        ""
    };
    rt.block_on(async {
        let ctx = SessionContext::new();
        for part in 0..files {
            let (lo, hi) = (part * per_file + 1, (part + 1) * per_file);
            ctx.sql(&format!(
                "COPY (SELECT value AS id, value % 1000 AS grp, (value * 7919) % 100003 AS amount{name} \
                 FROM generate_series({lo}, {hi}) ORDER BY id) TO '{}/part-{part:03}.parquet' STORED AS PARQUET",
                src.display()
            ))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        }
    });
}
