//! `format = "postgres"`: the rows are one query's result, streamed once at start.
//!
//! - The query runs in a read-only transaction: a mistaken statement cannot change the data.
//! - Its columns are checked by name and type before the first row arrives; then each row is
//!   checked as it arrives and appended to the columns (`query_raw` streams: the connection
//!   reads the next rows only once these are taken), so the rows are never collected first.
//! - Types: `float8`, and `float4`, `int2`, `int4`, whose every value a double holds exactly.
//!   `numeric` and `int8` are refused, since not all their values have an exact double: a
//!   query that wants them rounded says so with `::float8`. Text is refused, as in the
//!   other sources.
//! - The password comes from a file or an environment variable, never from `party.toml`,
//!   and no message names it: errors name the server as host, port, database and user.
//! - Connections are plain (no TLS): a unix socket or loopback.
use std::path::Path;
use std::time::Duration;

use fedmcmc_common::data::{ColumnSpec, Columns};
use futures::TryStreamExt;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Column, NoTls, Row};

use super::{ColumnBuilder, StoreError, source_error};
use crate::config::{PasswordSource, PostgresSource, readable_by_others};

/// How long start-up waits for a server that does not answer, unless the connection string
/// sets `connect_timeout`: a party should fail, not hang, when its database is away.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The parsed connection string. A password in it, or `sslmode=require` (this party connects
/// without TLS), is refused; messages never repeat the string.
pub fn client_config(source: &PostgresSource) -> Result<tokio_postgres::Config, String> {
    let config: tokio_postgres::Config = source.connection.parse().map_err(|e| {
        format!(
            "data.connection is not a valid connection string: {}",
            describe(&e)
        )
    })?;
    if config.get_password().is_some() {
        return Err(
            "data.connection holds a password: remove it, and give it with \
                    data.password_file or data.password_env"
                .into(),
        );
    }
    if config.get_ssl_mode() == SslMode::Require {
        return Err(
            "data.connection asks for sslmode=require, but the party connects to \
                    PostgreSQL without TLS: use a unix socket or loopback"
                .into(),
        );
    }
    Ok(config)
}

/// Loads the rows of `source`'s query, whose columns must be the model's `columns`, in order.
///
/// Runs on a thread of its own with its own runtime, so that it is synchronous like the
/// other sources and may be called inside the party's runtime (at start-up) or outside any.
pub fn load_postgres(
    source: &PostgresSource,
    columns: &[ColumnSpec],
) -> Result<Columns, StoreError> {
    let mut config = client_config(source).map_err(|m| source_error("postgres", m))?;
    let rows = ColumnBuilder::new(origin(&config), columns);
    if let Some(password) = &source.password {
        config.password(read_password(password).map_err(|m| rows.error(m))?);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    let query = source.query.as_str();
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| rows.error(format!("cannot start a runtime: {e}")))?;
                runtime.block_on(stream(&config, query, rows))
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Connects, streams the rows into `rows`, and closes the connection.
async fn stream(
    config: &tokio_postgres::Config,
    query: &str,
    mut rows: ColumnBuilder,
) -> Result<Columns, StoreError> {
    let (mut client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| rows.error(format!("cannot connect: {}", describe(&e))))?;
    let connection = tokio::spawn(connection);
    let read = read(&mut client, query, &mut rows).await;
    drop(client);
    // The connection ends once its client is gone; its errors were the client's.
    let _ = connection.await;
    read?;
    rows.finish()
}

async fn read(
    client: &mut Client,
    query: &str,
    rows: &mut ColumnBuilder,
) -> Result<(), StoreError> {
    let failed = |rows: &ColumnBuilder, what: &str, e: tokio_postgres::Error| {
        rows.error(format!("{what}: {}", describe(&e)))
    };
    let tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .await
        .map_err(|e| failed(rows, "cannot start a read-only transaction", e))?;
    let statement = tx
        .prepare(query)
        .await
        .map_err(|e| failed(rows, "cannot prepare the query", e))?;
    if !statement.params().is_empty() {
        return Err(rows.error("the query must take no parameters"));
    }
    let kinds = column_kinds(rows.names(), statement.columns()).map_err(|m| rows.error(m))?;
    let stream = tx
        .query_raw(&statement, std::iter::empty::<&str>())
        .await
        .map_err(|e| failed(rows, "the query failed", e))?;
    let mut stream = std::pin::pin!(stream);
    while let Some(row) = stream.try_next().await.map_err(|e| {
        let after = format!("the query failed after row {}", rows.row);
        failed(rows, &after, e)
    })? {
        rows.next_row();
        for (j, kind) in kinds.iter().enumerate() {
            match kind.read(&row, j) {
                Ok(Some(v)) => rows.push(j, v)?,
                Ok(None) => return Err(rows.refuse(j, "is NULL")),
                Err(e) => return Err(rows.refuse(j, format!("is unreadable: {}", describe(&e)))),
            }
        }
    }
    // Read-only: there is nothing to keep.
    tx.rollback()
        .await
        .map_err(|e| failed(rows, "cannot end the transaction", e))
}

/// The column types read, each exactly, as a double.
#[derive(Clone, Copy)]
enum Kind {
    Float8,
    Float4,
    Int4,
    Int2,
}

impl Kind {
    fn of(ty: &Type) -> Option<Kind> {
        Some(match *ty {
            Type::FLOAT8 => Kind::Float8,
            Type::FLOAT4 => Kind::Float4,
            Type::INT4 => Kind::Int4,
            Type::INT2 => Kind::Int2,
            _ => return None,
        })
    }

    fn read(self, row: &Row, j: usize) -> Result<Option<f64>, tokio_postgres::Error> {
        Ok(match self {
            Kind::Float8 => row.try_get::<_, Option<f64>>(j)?,
            Kind::Float4 => row.try_get::<_, Option<f32>>(j)?.map(f64::from),
            Kind::Int4 => row.try_get::<_, Option<i32>>(j)?.map(f64::from),
            Kind::Int2 => row.try_get::<_, Option<i16>>(j)?.map(f64::from),
        })
    }
}

/// Checks the query's columns against the model's names, in order, and their types.
fn column_kinds(expected: &[String], columns: &[Column]) -> Result<Vec<Kind>, String> {
    let names: Vec<&str> = columns.iter().map(Column::name).collect();
    if names != expected {
        return Err(format!(
            "the query's columns are ({}), expected ({})",
            names.join(", "),
            expected.join(", ")
        ));
    }
    columns
        .iter()
        .map(|c| {
            Kind::of(c.type_()).ok_or_else(|| {
                format!(
                    "column {} is of type {}, expected float8 (or float4, int2, int4); \
                     cast it with ::float8 if rounding it is meant",
                    c.name(),
                    c.type_()
                )
            })
        })
        .collect()
}

/// Reads the password. A file that group or others may read is refused, as libpq refuses
/// such a password file; one trailing newline is not part of the password.
fn read_password(source: &PasswordSource) -> Result<String, String> {
    let password = match source {
        PasswordSource::File(path) => read_password_file(path)?,
        PasswordSource::Env(name) => match std::env::var(name) {
            Ok(v) => v,
            Err(std::env::VarError::NotPresent) => {
                return Err(format!("the environment variable {name} is not set"));
            }
            // Not the error's own text: it quotes the value.
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!("the environment variable {name} is not UTF-8"));
            }
        },
    };
    if password.is_empty() {
        return Err("the password is empty".into());
    }
    Ok(password)
}

fn read_password_file(path: &Path) -> Result<String, String> {
    if let Some(mode) = readable_by_others(path) {
        return Err(format!(
            "the password file {} may be read by group or others (mode {mode:o}): \
             `chmod 600` it",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the password file {}: {e}", path.display()))?;
    let line = text.strip_suffix('\n').unwrap_or(&text);
    Ok(line.strip_suffix('\r').unwrap_or(line).to_string())
}

/// "postgres host=… port=… dbname=… user=…": what messages name instead of the connection
/// string.
fn origin(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let mut text = "postgres".to_string();
    for (key, value) in [
        ("host", Some(hosts.join(","))),
        ("port", Some(ports.join(","))),
        ("dbname", config.get_dbname().map(str::to_string)),
        ("user", config.get_user().map(str::to_string)),
    ] {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            text += &format!(" {key}={value}");
        }
    }
    text
}

/// The error and its causes: tokio-postgres says only "db error" and keeps the server's
/// message as the cause.
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    text
}
