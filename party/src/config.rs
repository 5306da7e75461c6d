//! `party.toml`: what an operator configures. Relative paths are resolved against the
//! directory of the config file, so a party directory can be moved as a whole.
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fedmcmc_common::accountant::Choice;
use fedmcmc_common::models::ModelSpec;
use fedmcmc_common::neighbours::Neighbours;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartyConfig {
    /// Name shown to the coordinator and in logs.
    pub name: String,
    /// Address the gRPC server binds, e.g. "127.0.0.1:50051".
    pub listen: SocketAddr,
    /// The durable privacy ledger (SQLite). Created on first start.
    pub ledger: PathBuf,
    /// File holding the bearer token callers must present (at least 16 characters).
    pub auth_token_file: PathBuf,
    #[serde(default = "default_neighbours")]
    pub neighbours: Neighbours,
    pub budget: BudgetConfig,
    pub data: DataConfig,
    pub model: ModelSpec,
    /// Caps and the idle lease; every key has a default.
    #[serde(default)]
    pub limits: RunLimits,
    /// Mutual TLS: the party's certificate and the CA its callers' certificates must chain
    /// to. Required unless `insecure` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::TlsFiles>,
    /// Serve plaintext gRPC, without TLS: for a closed test network only (logged loudly).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
}

/// `[limits]`: what one caller can make the party hold. Without caps, cheap plans (many
/// chains, tiny ε each) grew a party's memory and start-up time without bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunLimits {
    /// A run without a step for this long is closed and charged what it released, so that an
    /// abandoned run gives its reservation back.
    pub lease_seconds: u64,
    /// Runs open at once; OpenRun past it is refused.
    pub max_open_runs: u32,
    /// Chains one run may hold.
    pub max_chains: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            lease_seconds: 600,
            max_open_runs: 16,
            max_chains: 256,
        }
    }
}

impl RunLimits {
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_seconds)
    }
}

fn default_neighbours() -> Neighbours {
    Neighbours::Substitute
}

/// The party's whole privacy budget, for every run it will ever serve.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub epsilon: f64,
    pub delta: f64,
    /// Which accountant admits runs: `analytic`, `zcdp`, `rdp`, `pld`, or `best` (the
    /// default: the tightest of those that cover the releases). Checked when the file is read.
    #[serde(default, with = "accountant_key")]
    pub accountant: Choice,
}

/// [`Choice`] in a config file, spelt as on the command line.
mod accountant_key {
    use fedmcmc_common::accountant::Choice;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(choice: &Choice, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(choice.key())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Choice, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    #[serde(default)]
    pub format: DataFormat,
    pub path: PathBuf,
    /// SQLite table holding the rows (columns x1 … xd).
    #[serde(default = "default_table")]
    pub table: String,
}

fn default_table() -> String {
    "rows".to_string()
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataFormat {
    /// An embedded SQLite database (the default store).
    #[default]
    Sqlite,
    Csv,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid party config: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl PartyConfig {
    /// Reads, parses and validates a config file, resolving relative paths against its folder.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config: PartyConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        config.validate().map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(config)
    }

    fn resolve_paths(&mut self, base: &Path) {
        for p in [
            &mut self.ledger,
            &mut self.auth_token_file,
            &mut self.data.path,
        ] {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        if let Some(tls) = &mut self.tls {
            tls.resolve(base);
        }
    }

    /// Checks what TOML types cannot: a usable budget and a non-empty name, and TLS (or
    /// plaintext asked for by name).
    pub fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("name must not be empty".into());
        }
        let BudgetConfig { epsilon, delta, .. } = self.budget;
        if !(epsilon.is_finite() && epsilon > 0.0) {
            return Err(format!(
                "budget.epsilon must be a positive number, got {epsilon}"
            ));
        }
        if !(delta > 0.0 && delta < 1.0) {
            return Err(format!("budget.delta must lie in (0, 1), got {delta}"));
        }
        let RunLimits {
            lease_seconds,
            max_open_runs,
            max_chains,
        } = self.limits;
        for (key, value) in [
            ("lease_seconds", lease_seconds),
            ("max_open_runs", max_open_runs.into()),
            ("max_chains", max_chains.into()),
        ] {
            if value == 0 {
                return Err(format!("limits.{key} must be at least 1"));
            }
        }
        match (&self.tls, self.insecure) {
            (Some(tls), false) => tls.validate(),
            (None, true) => Ok(()),
            (None, false) => Err(
                "no [tls] section: give the party's certificate, key and the federation's CA (`coordinator certs` makes them), or set `insecure = true` to serve plaintext on a closed network".into(),
            ),
            (Some(_), true) => Err("both [tls] and `insecure = true`: choose one".into()),
        }
    }

    /// Reads the bearer token; a short or missing token is an error, never "no auth". A token
    /// file that group or others may read is served, with a warning.
    pub fn read_token(&self) -> Result<String, ConfigError> {
        if let Some(mode) = readable_by_others(&self.auth_token_file) {
            tracing::warn!(
                file = %self.auth_token_file.display(), mode = format!("{mode:o}"),
                "the token file is readable by group or others; `chmod 600` it"
            );
        }
        let text =
            std::fs::read_to_string(&self.auth_token_file).map_err(|source| ConfigError::Read {
                path: self.auth_token_file.clone(),
                source,
            })?;
        let token = text.trim().to_string();
        if token.len() < 16 || token.chars().any(|c| !c.is_ascii_graphic()) {
            return Err(ConfigError::Invalid {
                path: self.auth_token_file.clone(),
                message: "the token must be at least 16 printable ASCII characters".into(),
            });
        }
        Ok(token)
    }
}

/// The permission bits of `path` if group or others may read it; `None` otherwise or if it
/// cannot be read at all (reading it says why).
pub fn readable_by_others(path: &Path) -> Option<u32> {
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o044 != 0).then_some(mode)
}

/// Writes a secret (a token) readable by its owner only: created 0600, and narrowed to 0600
/// if it already existed, before the secret is written.
pub fn write_secret(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut file = std::fs::File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A party.toml whose `[budget]` has `accountant_line` (or none).
    fn load_with(accountant_line: Option<&str>) -> Result<PartyConfig, ConfigError> {
        let config = PartyConfig {
            name: "alpha".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            ledger: "ledger.sqlite".into(),
            auth_token_file: "token".into(),
            neighbours: Neighbours::Substitute,
            budget: BudgetConfig {
                epsilon: 1.0,
                delta: 1e-6,
                accountant: Choice::Best,
            },
            data: DataConfig {
                format: DataFormat::Sqlite,
                path: "rows.sqlite".into(),
                table: "rows".into(),
            },
            model: ModelSpec::flat_banana(2),
            limits: RunLimits::default(),
            tls: None,
            insecure: true,
        };
        let text = toml::to_string(&config).unwrap();
        assert!(text.contains("accountant = \"best\"\n"), "{text}");
        let text = text.replace("accountant = \"best\"\n", accountant_line.unwrap_or(""));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("party.toml");
        std::fs::write(&path, text).unwrap();
        PartyConfig::load(&path)
    }

    #[test]
    fn the_accountant_is_best_unless_configured_and_checked_when_read() {
        let accountant = |line: Option<&str>| load_with(line).map(|c| c.budget.accountant);
        assert_eq!(accountant(None).unwrap(), Choice::Best);
        for key in ["analytic", "zcdp", "rdp", "pld", "best"] {
            let line = format!("accountant = \"{key}\"\n");
            assert_eq!(accountant(Some(&line)).unwrap().key(), key);
        }
        let err = accountant(Some("accountant = \"tight\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not a valid party config")
                && err.contains("unknown accountant 'tight', expected 'analytic', 'zcdp', 'rdp', 'pld' or 'best'"),
            "{err}"
        );
    }

    #[test]
    fn limits_default_when_absent_and_are_checked() {
        let text = toml::to_string(&load_with(None).unwrap()).unwrap();
        // The table comes last: the file without it is a config of an earlier version.
        let (without, _) = text.split_once("[limits]").expect(&text);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("party.toml");
        let with = |limits: &str| {
            std::fs::write(&path, format!("{without}{limits}")).unwrap();
            PartyConfig::load(&path)
        };
        assert_eq!(with("").unwrap().limits, RunLimits::default());
        let set = with("[limits]\nlease_seconds = 30\nmax_open_runs = 2\n").unwrap();
        assert_eq!(
            set.limits,
            RunLimits {
                lease_seconds: 30,
                max_open_runs: 2,
                ..RunLimits::default()
            }
        );
        let err = with("[limits]\nmax_chains = 0\n").unwrap_err().to_string();
        assert!(
            err.contains("limits.max_chains must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn secrets_are_written_owner_only_and_loose_ones_are_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(readable_by_others(&path), Some(0o644));
        write_secret(&path, "a-token-of-enough-length\n").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(readable_by_others(&path), None);
        let fresh = dir.path().join("fresh");
        write_secret(&fresh, "x").unwrap();
        assert_eq!(
            std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "a-token-of-enough-length\n"
        );
    }
}
