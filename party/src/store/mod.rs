//! The party's rows: loaded once at start from an embedded SQLite database (the default), a
//! CSV file or a PostgreSQL query, validated row by row as they arrive, and kept column-major
//! in memory for the hot loop.
//!
//! A source holds the columns the model names ([`Model::columns`]: `x1 … xd` for the models
//! that read by position, the configured feature and label columns for a GLM), and may hold
//! others besides in SQLite and CSV. A value outside a column's public bounds refuses its row.
//!
//! [`Model::columns`]: fedmcmc_common::models::Model::columns
use std::fmt::Display;

pub use fedmcmc_common::data::column_names;
use fedmcmc_common::data::{ColumnSpec, Columns};

use crate::config::{DataConfig, DataFormat};

mod csv;
pub mod postgres;
mod sqlite;

pub use self::csv::load_csv;
pub use self::postgres::load_postgres;
pub use self::sqlite::{load_sqlite, write_sqlite};

/// A bad source: which one (a file, or a server and database), which row, and why.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{origin}: {message}")]
    Source { origin: String, message: String },
    #[error("{origin}: row {row}: {message}")]
    Row {
        origin: String,
        row: u64,
        message: String,
    },
}

fn source_error(origin: impl Display, message: impl Display) -> StoreError {
    StoreError::Source {
        origin: origin.to_string(),
        message: message.to_string(),
    }
}

/// Loads the configured data set: the named `columns`, each row checked against their bounds.
pub fn load(config: &DataConfig, columns: &[ColumnSpec]) -> Result<Columns, StoreError> {
    match &config.format {
        DataFormat::Sqlite => load_sqlite(&config.path, &config.table, columns),
        DataFormat::Csv => load_csv(&config.path, columns),
        DataFormat::Postgres(source) => load_postgres(source, columns),
    }
}

/// One source's rows, appended column by column as they arrive and checked on the way, so
/// that no source holds its rows twice; and its errors, naming the source and current row.
struct ColumnBuilder {
    origin: String,
    names: Vec<String>,
    bounds: Vec<Option<[f64; 2]>>,
    columns: Vec<Vec<f64>>,
    row: u64,
}

impl ColumnBuilder {
    fn new(origin: impl ToString, columns: &[ColumnSpec]) -> Self {
        ColumnBuilder {
            origin: origin.to_string(),
            names: columns.iter().map(|c| c.name.clone()).collect(),
            bounds: columns.iter().map(|c| c.bounds).collect(),
            columns: vec![Vec::new(); columns.len()],
            row: 0,
        }
    }

    /// Columns per row.
    fn d(&self) -> usize {
        self.names.len()
    }

    fn names(&self) -> &[String] {
        &self.names
    }

    /// Starts the next row. Rows are numbered from 1, as an operator would count them.
    fn next_row(&mut self) {
        self.row += 1;
    }

    /// Appends the current row's value of column `j`, refusing one that is not finite or
    /// lies outside the column's public bounds.
    fn push(&mut self, j: usize, v: f64) -> Result<(), StoreError> {
        if !v.is_finite() {
            return Err(self.refuse(j, format!("is {v}, not a finite number")));
        }
        if let Some([lo, hi]) = self.bounds[j]
            && !(lo..=hi).contains(&v)
        {
            return Err(self.refuse(j, format!("is {v}, outside its public bounds [{lo}, {hi}]")));
        }
        self.columns[j].push(v);
        Ok(())
    }

    /// The current row refused because its column `j` `what` (e.g. "is NULL").
    fn refuse(&self, j: usize, what: impl Display) -> StoreError {
        self.refuse_row(format!("column {} {what}", self.names[j]))
    }

    fn refuse_row(&self, message: impl ToString) -> StoreError {
        StoreError::Row {
            origin: self.origin.clone(),
            row: self.row,
            message: message.to_string(),
        }
    }

    /// The source refused as a whole (unreadable, wrong columns).
    fn error(&self, message: impl Display) -> StoreError {
        source_error(&self.origin, message)
    }

    fn finish(self) -> Result<Columns, StoreError> {
        if self.row == 0 {
            return Err(self.error("holds no rows"));
        }
        Columns::from_columns(self.columns).map_err(|e| source_error(&self.origin, e))
    }
}
