//! The session settings of the rewrite: `SET matview.rewrite = 'off' |
//! 'fresh' | 'stale_ok'` and `SET matview.rewrite_staleness = '10
//! minutes'`.

use std::fmt;

use datafusion::common::config::{
    ConfigEntry, ConfigExtension, ConfigField, ExtensionOptions, Visit,
};
use datafusion::error::{DataFusionError, Result};

use crate::spec::{display_seconds, parse_seconds};

/// Which views may answer a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RewriteMode {
    /// None: queries run as written.
    Off,
    /// Views whose sources have not changed since their last refresh.
    #[default]
    Fresh,
    /// Also views refreshed at most `matview.rewrite_staleness` ago whose
    /// sources changed since (but were not redefined).
    StaleOk,
}

impl fmt::Display for RewriteMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RewriteMode::Off => "off",
            RewriteMode::Fresh => "fresh",
            RewriteMode::StaleOk => "stale_ok",
        })
    }
}

fn invalid(key: &str, value: &str, hint: &str) -> DataFusionError {
    DataFusionError::Configuration(format!(
        "invalid value for parameter \"matview.{key}\": \"{value}\"\nHINT: {hint}"
    ))
}

impl ConfigField for RewriteMode {
    fn visit<V: Visit>(&self, v: &mut V, key: &str, description: &'static str) {
        v.some(key, self, description)
    }

    fn set(&mut self, _key: &str, value: &str) -> Result<()> {
        *self = match value.trim().to_ascii_lowercase().as_str() {
            "off" | "false" => RewriteMode::Off,
            "fresh" | "on" | "true" => RewriteMode::Fresh,
            "stale_ok" => RewriteMode::StaleOk,
            _ => {
                return Err(invalid(
                    "rewrite",
                    value,
                    "Available values: off, fresh, stale_ok.",
                ));
            }
        };
        Ok(())
    }

    fn reset(&mut self, _key: &str) -> Result<()> {
        *self = RewriteMode::default();
        Ok(())
    }
}

/// How long ago a view used under `stale_ok` may have been refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staleness(pub u64);

impl Default for Staleness {
    fn default() -> Self {
        Staleness(600)
    }
}

impl fmt::Display for Staleness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&display_seconds(self.0))
    }
}

impl ConfigField for Staleness {
    fn visit<V: Visit>(&self, v: &mut V, key: &str, description: &'static str) {
        v.some(key, self, description)
    }

    fn set(&mut self, _key: &str, value: &str) -> Result<()> {
        *self = Staleness(parse_seconds(value).ok_or_else(|| {
            invalid(
                "rewrite_staleness",
                value,
                "Give a duration such as '10 minutes', '30 seconds' or '1 hour'.",
            )
        })?);
        Ok(())
    }

    fn reset(&mut self, _key: &str) -> Result<()> {
        *self = Staleness::default();
        Ok(())
    }
}

/// The `matview.*` settings of a session.
#[derive(Debug, Clone, Default)]
pub struct MatviewConfig {
    /// Which materialized views may answer queries over their sources:
    /// off, fresh (the default) or stale_ok.
    pub rewrite: RewriteMode,
    /// Under `stale_ok`, how long ago a stale view may have been
    /// refreshed to be used.
    pub rewrite_staleness: Staleness,
}

impl ExtensionOptions for MatviewConfig {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "rewrite" => self.rewrite.set(key, value),
            "rewrite_staleness" => self.rewrite_staleness.set(key, value),
            _ => Err(DataFusionError::Configuration(format!(
                "unrecognized configuration parameter \"matview.{key}\"\nHINT: The matview settings are rewrite and rewrite_staleness."
            ))),
        }
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        vec![
            ConfigEntry {
                key: "matview.rewrite".into(),
                value: Some(self.rewrite.to_string()),
                description: "Which materialized views may answer queries over their sources: off, fresh (the default) or stale_ok.",
            },
            ConfigEntry {
                key: "matview.rewrite_staleness".into(),
                value: Some(self.rewrite_staleness.to_string()),
                description: "Under matview.rewrite = 'stale_ok', how long ago a stale view may have been refreshed to be used.",
            },
        ]
    }
}

impl ConfigExtension for MatviewConfig {
    const PREFIX: &'static str = "matview";
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::config::ConfigOptions;

    #[test]
    fn settings_parse_show_and_refuse_bad_values() {
        let mut options = ConfigOptions::new();
        options.extensions.insert(MatviewConfig::default());
        options.set("matview.rewrite", "stale_ok").unwrap();
        options.set("matview.rewrite_staleness", "1 hour").unwrap();
        let config = options.extensions.get::<MatviewConfig>().unwrap();
        assert_eq!(config.rewrite, RewriteMode::StaleOk);
        assert_eq!(config.rewrite_staleness, Staleness(3600));
        let shown: Vec<(String, Option<String>)> = options
            .entries()
            .into_iter()
            .filter(|e| e.key.starts_with("matview."))
            .map(|e| (e.key, e.value))
            .collect();
        assert_eq!(
            shown,
            [
                ("matview.rewrite".into(), Some("stale_ok".into())),
                ("matview.rewrite_staleness".into(), Some("1 hour".into())),
            ]
        );
        let error = options.set("matview.rewrite", "always").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("invalid value for parameter \"matview.rewrite\": \"always\""),
            "{error}"
        );
        assert!(options.set("matview.rewrite_staleness", "soon").is_err());
    }
}
