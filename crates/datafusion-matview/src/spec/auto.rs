//! A view's settings: automatic refresh (`WITH (auto_refresh = true,
//! target_lag = '5 minutes')`) and query rewrite (`rewrite = false`), on CREATE;
//! `ALTER MATERIALIZED VIEW ... SET (...)` / `RESET (...)` later.

use std::time::Duration;

use super::*;

/// The target lag a view gets when `auto_refresh` is on and none is set.
pub const DEFAULT_TARGET_LAG: Duration = Duration::from_secs(60);

/// How `dfmv serve` keeps a view up to date on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AutoRefresh {
    /// `auto_refresh`: the server refreshes the view when it is stale.
    #[serde(default)]
    pub enabled: bool,
    /// `target_lag`; `None`: [`DEFAULT_TARGET_LAG`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_lag: Option<TargetLag>,
    /// `rewrite = false`: queries over the view's sources are never
    /// answered from it (see [`crate::rewrite`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_rewrite: bool,
}

impl AutoRefresh {
    /// Whether nothing is set (the default: not stored).
    pub fn is_unset(&self) -> bool {
        *self == Self::default()
    }

    /// The target lag in force.
    pub fn lag(&self) -> TargetLag {
        self.target_lag
            .unwrap_or(TargetLag::Within(DEFAULT_TARGET_LAG.as_secs()))
    }

    /// Applies `SET (name = value, ...)`: an unknown name or a bad value
    /// is an error in PostgreSQL's words.
    pub fn set(&mut self, options: &[(String, String)]) -> Result<(), String> {
        for (name, value) in options {
            match name.to_ascii_lowercase().as_str() {
                "auto_refresh" => self.enabled = parse_bool(name, value)?,
                "target_lag" => self.target_lag = Some(TargetLag::parse(value)?),
                "rewrite" => self.no_rewrite = !parse_bool(name, value)?,
                _ => return Err(unrecognized(name)),
            }
        }
        Ok(())
    }

    /// Applies `RESET (name, ...)`.
    pub fn reset(&mut self, names: &[String]) -> Result<(), String> {
        for name in names {
            match name.to_ascii_lowercase().as_str() {
                "auto_refresh" => self.enabled = false,
                "target_lag" => self.target_lag = None,
                "rewrite" => self.no_rewrite = false,
                _ => return Err(unrecognized(name)),
            }
        }
        Ok(())
    }
}

fn unrecognized(name: &str) -> String {
    format!(
        "unrecognized parameter \"{name}\"\nHINT: A materialized view takes auto_refresh (true or false), target_lag ('5 minutes', or 'downstream') and rewrite (true or false)."
    )
}

fn parse_bool(name: &str, value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err(format!(
            "invalid value for boolean option \"{name}\": {value}"
        )),
    }
}

/// How stale an automatically refreshed view may become.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetLag {
    /// At most this many seconds behind its sources.
    Within(u64),
    /// Refreshed only when a view over it that is refreshed automatically
    /// needs it (Snowflake's `DOWNSTREAM`).
    Downstream,
}

impl TargetLag {
    /// `'5 minutes'`, `'90 seconds'`, `'1 hour'`, `'2 days'` (also `s`,
    /// `min`, `h`, `d`, and several units: `'1 hour 30 minutes'`), or
    /// `'downstream'`. At least one second.
    pub fn parse(text: &str) -> Result<Self, String> {
        let invalid = || {
            format!(
                "invalid value for parameter \"target_lag\": \"{text}\"\nHINT: Give a duration such as '5 minutes', '30 seconds' or '1 hour', or 'downstream'."
            )
        };
        if text.trim().eq_ignore_ascii_case("downstream") {
            return Ok(TargetLag::Downstream);
        }
        parse_seconds(text)
            .map(TargetLag::Within)
            .ok_or_else(invalid)
    }

    /// As `materialized_views()` shows it: `5 minutes`, `downstream`.
    pub fn display(&self) -> String {
        match self {
            TargetLag::Downstream => "downstream".to_owned(),
            TargetLag::Within(seconds) => display_seconds(*seconds),
        }
    }

    /// The lag as a duration; `None` for `downstream`.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            TargetLag::Within(seconds) => Some(Duration::from_secs(*seconds)),
            TargetLag::Downstream => None,
        }
    }
}

/// A duration in whole seconds, at least one: `'5 minutes'`, `'90
/// seconds'`, `'1 hour'`, `'2 days'` (also `s`, `min`, `h`, `d`, and
/// several units: `'1 hour 30 minutes'`).
pub fn parse_seconds(text: &str) -> Option<u64> {
    let trimmed = text.trim().to_ascii_lowercase();
    // Numbers and units, with or without a space between them.
    let mut seconds: u64 = 0;
    let mut rest = trimmed.as_str();
    let mut any = false;
    while !rest.trim_start().is_empty() {
        rest = rest.trim_start();
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return None;
        }
        let number: u64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = match unit {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86_400,
            _ => return None,
        };
        seconds = number.checked_mul(scale)?.checked_add(seconds)?;
        any = true;
    }
    (any && seconds > 0).then_some(seconds)
}

/// `seconds` in words, in the largest unit that divides it: `5 minutes`.
pub fn display_seconds(seconds: u64) -> String {
    let (n, unit) = match seconds {
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3600 == 0 => (s / 3600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_lags_parse_and_print() {
        for (text, seconds, shown) in [
            ("5 minutes", 300, "5 minutes"),
            ("90 seconds", 90, "90 seconds"),
            ("1 hour", 3600, "1 hour"),
            ("1 hour 30 minutes", 5400, "90 minutes"),
            ("2d", 172_800, "2 days"),
            (" 30S ", 30, "30 seconds"),
        ] {
            let lag = TargetLag::parse(text).unwrap();
            assert_eq!(lag, TargetLag::Within(seconds), "{text}");
            assert_eq!(lag.display(), shown);
        }
        assert_eq!(
            TargetLag::parse("DOWNSTREAM").unwrap(),
            TargetLag::Downstream
        );
        for bad in ["", "5", "minutes", "0 seconds", "5 fortnights", "-1 minute"] {
            assert!(TargetLag::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn set_and_reset_name_unknown_parameters() {
        let mut auto = AutoRefresh::default();
        auto.set(&[
            ("AUTO_REFRESH".into(), "true".into()),
            ("target_lag".into(), "10 minutes".into()),
        ])
        .unwrap();
        assert_eq!(
            auto,
            AutoRefresh {
                enabled: true,
                target_lag: Some(TargetLag::Within(600)),
                no_rewrite: false,
            }
        );
        auto.reset(&["target_lag".into()]).unwrap();
        assert_eq!(auto.lag(), TargetLag::Within(60));
        assert!(
            auto.set(&[("fillfactor".into(), "70".into())])
                .unwrap_err()
                .starts_with("unrecognized parameter \"fillfactor\"")
        );
        assert!(
            auto.set(&[("auto_refresh".into(), "maybe".into())])
                .is_err()
        );
    }
}
