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
    /// The built-in model the `party` binary serves. A party built with its own model in
    /// Rust (`fedmcmc_party::cli::main`, see `party/examples/custom_model`) has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    /// Caps and the idle lease; every key has a default.
    #[serde(default)]
    pub limits: RunLimits,
    /// Mutual TLS: the party's certificate and the CA its callers' certificates must chain
    /// to. Required unless `insecure` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::TlsFiles>,
    /// Where to serve `/health` (plain text) and `/metrics` (Prometheus) over plain HTTP,
    /// e.g. "127.0.0.1:9464"; none when absent. No token guards it: bind it to an interface
    /// only the operator's monitoring reaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
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
    /// Secure aggregation: the fewest parties colluding with the coordinator a run must
    /// tolerate (its threshold t); a run that assumes fewer is refused. 0 trusts that no
    /// other party colludes, which shares the noise among all of them.
    pub min_threshold: u32,
    /// Describe calls per second one caller is answered at, sustained, after a burst of
    /// `describe_burst` (`throttle.rs`): the one call a caller can repeat for nothing.
    pub describe_per_second: u32,
    pub describe_burst: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            lease_seconds: 600,
            max_open_runs: 16,
            max_chains: 256,
            min_threshold: 0,
            describe_per_second: crate::throttle::PER_SECOND,
            describe_burst: crate::throttle::BURST,
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

/// `[data]`: where the rows come from. In the file it is one flat table (`DataSection`);
/// `path` and `table` stay plain fields so that code building a SQLite or CSV config keeps
/// its shape.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "DataSection", into = "DataSection")]
pub struct DataConfig {
    pub format: DataFormat,
    /// The SQLite or CSV file (empty for PostgreSQL).
    pub path: PathBuf,
    /// SQLite table holding the rows (the model's columns: x1 … xd, or a GLM's named ones).
    pub table: String,
}

fn default_table() -> String {
    "rows".to_string()
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DataFormat {
    /// An embedded SQLite database (the default store).
    #[default]
    Sqlite,
    Csv,
    /// A query against a PostgreSQL server, streamed once at start.
    Postgres(PostgresSource),
}

/// `format = "postgres"`: one query, run at start in a read-only transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresSource {
    /// libpq-style `key=value` pairs or a `postgresql://` URL, without a password: a config
    /// file gets copied and quoted, so one holding a password is refused.
    pub connection: String,
    /// One statement whose columns are the model's, in order.
    pub query: String,
    /// Where the password is read at start; none for peer, trust or certificate logins.
    pub password: Option<PasswordSource>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordSource {
    /// A file only its owner may read (mode 600; refused otherwise, as libpq does).
    File(PathBuf),
    /// An environment variable of the party's process.
    Env(String),
}

/// `[data]` as written in `party.toml`: every source's keys in one table, checked against
/// `format` when read.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DataSection {
    #[serde(default)]
    format: FormatKey,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    connection: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    password_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    password_env: Option<String>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FormatKey {
    #[default]
    Sqlite,
    Csv,
    Postgres,
}

impl TryFrom<DataSection> for DataConfig {
    type Error = String;

    fn try_from(s: DataSection) -> Result<Self, String> {
        let postgres_keys = s.connection.is_some()
            || s.query.is_some()
            || s.password_file.is_some()
            || s.password_env.is_some();
        if s.format != FormatKey::Postgres {
            if postgres_keys {
                return Err(
                    "connection, query, password_file and password_env are keys of \
                            format = \"postgres\""
                        .into(),
                );
            }
            let format = match s.format {
                FormatKey::Csv => DataFormat::Csv,
                _ => DataFormat::Sqlite,
            };
            return Ok(DataConfig {
                format,
                path: s.path.ok_or("data.path is required for SQLite and CSV")?,
                table: s.table.unwrap_or_else(default_table),
            });
        }
        if s.path.is_some() || s.table.is_some() {
            return Err(
                "format = \"postgres\" reads no file or table: name the columns in query".into(),
            );
        }
        let password = match (s.password_file, s.password_env) {
            (Some(_), Some(_)) => {
                return Err("give at most one of password_file and password_env".into());
            }
            (file, env) => file
                .map(PasswordSource::File)
                .or(env.map(PasswordSource::Env)),
        };
        Ok(DataConfig {
            format: DataFormat::Postgres(PostgresSource {
                connection: s
                    .connection
                    .ok_or("format = \"postgres\" needs connection")?,
                query: s.query.ok_or("format = \"postgres\" needs query")?,
                password,
            }),
            path: PathBuf::new(),
            table: String::new(),
        })
    }
}

impl From<DataConfig> for DataSection {
    fn from(c: DataConfig) -> Self {
        let file = |format| DataSection {
            format,
            path: Some(c.path.clone()),
            table: Some(c.table.clone()),
            connection: None,
            query: None,
            password_file: None,
            password_env: None,
        };
        match c.format {
            DataFormat::Sqlite => file(FormatKey::Sqlite),
            DataFormat::Csv => file(FormatKey::Csv),
            DataFormat::Postgres(PostgresSource {
                connection,
                query,
                password,
            }) => {
                let (password_file, password_env) = match password {
                    Some(PasswordSource::File(p)) => (Some(p), None),
                    Some(PasswordSource::Env(v)) => (None, Some(v)),
                    None => (None, None),
                };
                DataSection {
                    format: FormatKey::Postgres,
                    path: None,
                    table: None,
                    connection: Some(connection),
                    query: Some(query),
                    password_file,
                    password_env,
                }
            }
        }
    }
}

impl DataConfig {
    fn resolve_paths(&mut self, base: &Path) {
        let path = match &mut self.format {
            DataFormat::Sqlite | DataFormat::Csv => &mut self.path,
            DataFormat::Postgres(PostgresSource {
                password: Some(PasswordSource::File(p)),
                ..
            }) => p,
            DataFormat::Postgres(_) => return,
        };
        if path.is_relative() {
            *path = base.join(&*path);
        }
    }

    /// What serde cannot check: a usable connection string and non-empty names.
    fn validate(&self) -> Result<(), String> {
        let DataFormat::Postgres(source) = &self.format else {
            return Ok(());
        };
        crate::store::postgres::client_config(source)?;
        if source.query.trim().is_empty() {
            return Err("data.query must not be empty".into());
        }
        if source.password == Some(PasswordSource::Env(String::new())) {
            return Err("data.password_env must name a variable".into());
        }
        Ok(())
    }
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
            message: parse_error(&text, &e),
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
        for p in [&mut self.ledger, &mut self.auth_token_file] {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        self.data.resolve_paths(base);
        if let Some(tls) = &mut self.tls {
            tls.resolve(base);
        }
    }

    /// Checks what TOML types cannot: a usable budget, a non-empty name, a usable data source,
    /// and TLS (or plaintext asked for by name).
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
        let reservation = fedmcmc_common::mechanism::exact_noise_reservation(epsilon, delta);
        if epsilon <= 10.0 * reservation {
            return Err(format!(
                "budget.epsilon = {epsilon} is too small: releasing exact discrete noise reserves {reservation:.1e} of it"
            ));
        }
        let RunLimits {
            lease_seconds,
            max_open_runs,
            max_chains,
            describe_per_second,
            describe_burst,
            ..
        } = self.limits;
        for (key, value) in [
            ("lease_seconds", lease_seconds),
            ("max_open_runs", max_open_runs.into()),
            ("max_chains", max_chains.into()),
            ("describe_per_second", describe_per_second.into()),
            ("describe_burst", describe_burst.into()),
        ] {
            if value == 0 {
                return Err(format!("limits.{key} must be at least 1"));
            }
        }
        self.data.validate()?;
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

/// Where and why the file does not parse, without quoting it: toml's own rendering shows the
/// offending line, which could be a password put where it does not belong.
fn parse_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let line = before.matches('\n').count() + 1;
            let column = before[line_start..].chars().count() + 1;
            format!("line {line}, column {column}: {}", e.message())
        }
        None => e.message().to_string(),
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
mod tests;
