//! What dfmv shows people: sizes, times, `SHOW MATERIALIZED VIEWS` made
//! readable, and `\dm`.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit, TimestampMicrosecondType};
use datafusion::error::Result;
use datafusion_matview::spec::ViewEntry;

/// `812 B`, `3.7 KiB`, `1.2 GiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `2026-12-02 10:03:18 UTC`.
pub fn human_time(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `less than a minute ago`, `5 minutes ago`, `3 hours ago`, `2 days ago`;
/// the date itself when older than a month or in the future.
pub fn time_ago(time: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let seconds = (now - time).num_seconds();
    let plural = |n: i64, unit: &str| {
        if n == 1 {
            format!("1 {unit} ago")
        } else {
            format!("{n} {unit}s ago")
        }
    };
    match seconds {
        s if s < -5 => human_time(time),
        s if s < 60 => "less than a minute ago".to_owned(),
        s if s < 3600 => plural(s / 60, "minute"),
        s if s < 86_400 => plural(s / 3600, "hour"),
        s if s < 30 * 86_400 => plural(s / 86_400, "day"),
        _ => human_time(time),
    }
}

/// `1 row`, `1234 rows`.
pub fn rows(n: u64) -> String {
    if n == 1 {
        "1 row".to_owned()
    } else {
        format!("{n} rows")
    }
}

/// Parses `512`, `64k`, `10m`, `2g`, `1tb` (case-insensitive, powers of
/// 1024), as `datafusion-cli` reads its memory and disk limits.
pub fn parse_size(size: &str, label: &str) -> Result<usize, String> {
    let lower = size.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, suffix) = lower.split_at(split);
    if digits.is_empty() {
        return Err(format!("Invalid {label} '{size}'"));
    }
    let number: usize = digits
        .parse()
        .map_err(|_| format!("Invalid numeric value in {label} '{size}'"))?;
    let shift = match suffix {
        "" | "b" => 0,
        "k" | "kb" => 10,
        "m" | "mb" => 20,
        "g" | "gb" => 30,
        "t" | "tb" => 40,
        _ => return Err(format!("Invalid {label} '{size}'")),
    };
    1usize
        .checked_shl(shift)
        .and_then(|m| number.checked_mul(m))
        .ok_or_else(|| format!("{label} '{size}' is too large"))
}

/// A view's lag in words: `none`, `less than a minute`, `5 minutes`,
/// `2 hours`, `3 days`.
pub fn human_lag(ms: i64) -> String {
    let minutes = ms / 60_000;
    let (n, unit) = match minutes {
        _ if ms <= 0 => return "none".to_owned(),
        0 => return "less than a minute".to_owned(),
        m if m < 60 => (m, "minute"),
        m if m < 24 * 60 => (m / 60, "hour"),
        m => (m / (24 * 60), "day"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// The rows of `SHOW MATERIALIZED VIEWS` for people: `size_bytes` becomes
/// `size` (`3.7 KiB`), timestamps become `2026-12-02 10:03:18 UTC`, the
/// lag words (`none`, `less than a minute`, `5 minutes`).
pub fn humanize_show(batches: &[RecordBatch]) -> Result<(Arc<Schema>, Vec<RecordBatch>)> {
    let Some(first) = batches.first() else {
        return Ok((Arc::new(Schema::empty()), vec![]));
    };
    let schema = first.schema();
    debug_assert!(batches.iter().all(|b| b.schema() == schema));
    let mut fields = vec![];
    for field in schema.fields() {
        fields.push(match (field.name().as_str(), field.data_type()) {
            ("size_bytes", DataType::Int64) => Field::new("size", DataType::Utf8, true),
            (_, DataType::Timestamp(TimeUnit::Microsecond, _))
            | ("lag", DataType::Duration(TimeUnit::Millisecond)) => {
                Field::new(field.name(), DataType::Utf8, true)
            }
            _ => field.as_ref().clone(),
        });
    }
    let out_schema = Arc::new(Schema::new(fields));
    let mut out = vec![];
    for batch in batches {
        let mut columns: Vec<ArrayRef> = vec![];
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            columns.push(match (field.name().as_str(), field.data_type()) {
                ("size_bytes", DataType::Int64) => {
                    let sizes = column.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
                    Arc::new(StringArray::from_iter((0..sizes.len()).map(|i| {
                        sizes.is_valid(i).then(|| human_size(sizes.value(i) as u64))
                    })))
                }
                (_, DataType::Timestamp(TimeUnit::Microsecond, _)) => {
                    let times = column.as_primitive::<TimestampMicrosecondType>();
                    Arc::new(StringArray::from_iter((0..times.len()).map(|i| {
                        times
                            .is_valid(i)
                            .then(|| DateTime::from_timestamp_micros(times.value(i)))
                            .flatten()
                            .map(human_time)
                    })))
                }
                ("lag", DataType::Duration(TimeUnit::Millisecond)) => {
                    let lags = column
                        .as_primitive::<datafusion::arrow::datatypes::DurationMillisecondType>();
                    Arc::new(StringArray::from_iter(
                        (0..lags.len()).map(|i| lags.is_valid(i).then(|| human_lag(lags.value(i)))),
                    ))
                }
                _ => Arc::clone(column),
            });
        }
        out.push(RecordBatch::try_new(Arc::clone(&out_schema), columns)?);
    }
    Ok((out_schema, out))
}

/// A psql-style name pattern: `*` (or `%`) any characters, `?` (or `_`)
/// one, unquoted letters folded to lower case, `"..."` taken literally,
/// and unquoted dots separating catalog, schema and name.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    /// Name part first, then schema, then catalog.
    parts: Vec<Vec<Piece>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Char(char),
    One,
    Any,
}

impl Pattern {
    pub fn parse(pattern: &str) -> Self {
        let mut parts = vec![vec![]];
        let mut quoted = false;
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            let part = parts.last_mut().expect("never empty");
            match c {
                '"' if quoted && chars.peek() == Some(&'"') => {
                    chars.next();
                    part.push(Piece::Char('"'));
                }
                '"' => quoted = !quoted,
                c if quoted => part.push(Piece::Char(c)),
                '.' => parts.push(vec![]),
                '*' | '%' => part.push(Piece::Any),
                '?' | '_' => part.push(Piece::One),
                c => part.extend(c.to_lowercase().map(Piece::Char)),
            }
        }
        parts.reverse();
        Self { parts }
    }

    /// Whether the pattern matches a view; parts it does not give match anything.
    pub fn matches(&self, view: &ViewEntry) -> bool {
        self.matches_name(&view.name)
    }

    /// Whether the pattern matches a view's name.
    pub fn matches_name(&self, name: &datafusion_matview::spec::QualifiedName) -> bool {
        let names = [&name.name, &name.schema, &name.catalog];
        self.parts.len() <= names.len()
            && self
                .parts
                .iter()
                .zip(names)
                .all(|(pattern, name)| matches(pattern, &name.chars().collect::<Vec<_>>()))
    }
}

impl Pattern {
    /// The parts of a pattern without wildcards (name first), which can
    /// be looked up rather than matched against every view.
    pub fn literal(&self) -> Option<Vec<String>> {
        self.parts
            .iter()
            .map(|part| {
                part.iter()
                    .map(|piece| match piece {
                        Piece::Char(c) => Some(*c),
                        Piece::One | Piece::Any => None,
                    })
                    .collect()
            })
            .collect()
    }
}

fn matches(pattern: &[Piece], text: &[char]) -> bool {
    // reachable[j]: the pattern so far can match text[..j]
    let mut reachable = vec![false; text.len() + 1];
    reachable[0] = true;
    for piece in pattern {
        let mut next = vec![false; text.len() + 1];
        for j in 0..=text.len() {
            match piece {
                Piece::Any => next[j] = reachable[j] || (j > 0 && next[j - 1]),
                Piece::One => next[j] = j > 0 && reachable[j - 1],
                Piece::Char(c) => next[j] = j > 0 && reachable[j - 1] && text[j - 1] == *c,
            }
        }
        reachable = next;
    }
    reachable[text.len()]
}

/// The rows of `\dm`: one per materialized view matching `pattern`, sorted.
/// `raw` (for csv, tsv, json and nd-json output) gives rows and size in
/// bytes as numbers and the refresh time as a timestamp, for scripts.
pub fn list_views(
    views: &[&ViewEntry],
    pattern: Option<&Pattern>,
    default_catalog: &str,
    now: DateTime<Utc>,
    raw: bool,
) -> RecordBatch {
    let mut views: Vec<&ViewEntry> = views
        .iter()
        .copied()
        .filter(|v| pattern.is_none_or(|p| p.matches(v)))
        .collect();
    views.sort_by(|a, b| a.name.cmp(&b.name));
    let column = |f: &dyn Fn(&ViewEntry) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from_iter(views.iter().map(|v| f(v))))
    };
    let schema_column = column(&|v| {
        Some(if v.name.catalog == default_catalog {
            v.name.schema.clone()
        } else {
            format!("{}.{}", v.name.catalog, v.name.schema)
        })
    });
    let name_column = column(&|v| Some(v.name.name.clone()));
    if raw {
        let number = |f: &dyn Fn(&ViewEntry) -> Option<u64>| -> ArrayRef {
            Arc::new(UInt64Array::from_iter(views.iter().map(|v| f(v))))
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("Schema", DataType::Utf8, false),
            Field::new("Name", DataType::Utf8, false),
            Field::new("Rows", DataType::UInt64, true),
            Field::new("Size", DataType::UInt64, true),
            Field::new("Last refreshed", DataType::Utf8, true),
        ]));
        let columns = vec![
            schema_column,
            name_column,
            number(&|v| v.snapshot.as_ref().map(|s| s.row_count)),
            number(&|v| v.snapshot.as_ref().map(|s| s.size_bytes)),
            column(&|v| v.snapshot.as_ref().map(|s| s.refreshed_at.to_rfc3339())),
        ];
        return RecordBatch::try_new(schema, columns).expect("columns match the schema");
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("Schema", DataType::Utf8, false),
        Field::new("Name", DataType::Utf8, false),
        Field::new("Rows", DataType::Utf8, false),
        Field::new("Size", DataType::Utf8, false),
        Field::new("Last refreshed", DataType::Utf8, false),
    ]));
    let columns = vec![
        schema_column,
        name_column,
        column(&|v| {
            Some(
                v.snapshot
                    .as_ref()
                    .map_or(String::new(), |s| s.row_count.to_string()),
            )
        }),
        column(&|v| {
            Some(
                v.snapshot
                    .as_ref()
                    .map_or(String::new(), |s| human_size(s.size_bytes)),
            )
        }),
        column(&|v| {
            Some(match &v.snapshot {
                Some(s) => time_ago(s.refreshed_at, now),
                None => "not populated".to_owned(),
            })
        }),
    ];
    RecordBatch::try_new(schema, columns).expect("columns match the schema")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(3789), "3.7 KiB");
        assert_eq!(human_size(1 << 30), "1.0 GiB");
        assert_eq!(human_size(1_288_490_189), "1.2 GiB");
    }

    #[test]
    fn times_are_relative_within_a_month() {
        let now = DateTime::parse_from_rfc3339("2026-12-02T10:03:18Z")
            .unwrap()
            .to_utc();
        let ago = |s: i64| time_ago(now - chrono::Duration::seconds(s), now);
        assert_eq!(ago(0), "less than a minute ago");
        assert_eq!(ago(59), "less than a minute ago");
        assert_eq!(ago(60), "1 minute ago");
        assert_eq!(ago(5 * 60 + 3), "5 minutes ago");
        assert_eq!(ago(3 * 3600), "3 hours ago");
        assert_eq!(ago(2 * 86_400), "2 days ago");
        assert_eq!(ago(40 * 86_400), "2026-10-23 10:03:18 UTC");
        assert_eq!(human_time(now), "2026-12-02 10:03:18 UTC");
    }

    #[test]
    fn sizes_parse_like_datafusion_cli() {
        assert_eq!(parse_size("512", "x"), Ok(512));
        assert_eq!(parse_size("64k", "x"), Ok(64 << 10));
        assert_eq!(parse_size("10MB", "x"), Ok(10 << 20));
        assert_eq!(parse_size("2g", "x"), Ok(2 << 30));
        assert!(
            parse_size("2x", "memory")
                .unwrap_err()
                .contains("Invalid memory")
        );
        assert!(parse_size("", "memory").is_err());
    }

    #[test]
    fn patterns_work_like_psql() {
        let p = |pattern: &str, text: &str| {
            let pattern = Pattern::parse(pattern);
            matches(&pattern.parts[0], &text.chars().collect::<Vec<_>>())
        };
        assert!(p("sales*", "sales_by_region"));
        assert!(p("SALES%", "sales_by_region"));
        assert!(p("s?les", "sales"));
        assert!(p("s_les", "sales"));
        assert!(!p("sales", "sales_by_region"));
        assert!(!p("\"Sales\"", "sales"));
        assert!(p("\"Sales\"", "Sales"));
        assert!(p("*", ""));
        assert_eq!(Pattern::parse("public.v*").parts.len(), 2);
    }
}
