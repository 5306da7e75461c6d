//! The party's rows: loaded once at start from an embedded SQLite database (the default) or a
//! CSV file, validated row by row, and kept column-major in memory for the hot loop.
//!
//! Both formats hold one column per data dimension named `x1 … xd`.
use std::path::{Path, PathBuf};

use fedmcmc_common::data::Columns;
use rusqlite::types::ValueRef;

use crate::config::{DataConfig, DataFormat};

/// A bad input file: which file, which row, and why.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path}: row {row}: {message}")]
    Row {
        path: PathBuf,
        row: u64,
        message: String,
    },
}

fn file_error(path: &Path, message: impl ToString) -> StoreError {
    StoreError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Column names for a row of `d` values.
pub fn column_names(d: usize) -> Vec<String> {
    (1..=d).map(|j| format!("x{j}")).collect()
}

/// Loads the configured data set, expecting `d` columns per row.
pub fn load(config: &DataConfig, d: usize) -> Result<Columns, StoreError> {
    match config.format {
        DataFormat::Sqlite => load_sqlite(&config.path, &config.table, d),
        DataFormat::Csv => load_csv(&config.path, d),
    }
}

fn check_value(path: &Path, row: u64, column: &str, v: f64) -> Result<f64, StoreError> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(StoreError::Row {
            path: path.to_path_buf(),
            row,
            message: format!("column {column} is {v}, not a finite number"),
        })
    }
}

fn finish(path: &Path, columns: Vec<Vec<f64>>) -> Result<Columns, StoreError> {
    if columns.first().is_none_or(|c| c.is_empty()) {
        return Err(file_error(path, "holds no rows"));
    }
    Columns::from_columns(columns).map_err(|e| file_error(path, e))
}

/// Rows are numbered from 1 in table order (`rowid`), as an operator would count them.
pub fn load_sqlite(path: &Path, table: &str, d: usize) -> Result<Columns, StoreError> {
    if !path.exists() {
        return Err(file_error(path, "no such file"));
    }
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| file_error(path, e))?;
    if !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(file_error(path, format!("invalid table name {table:?}")));
    }
    let names = column_names(d);
    let sql = format!("SELECT {} FROM {table} ORDER BY rowid", names.join(", "));
    let mut stmt = conn.prepare(&sql).map_err(|e| {
        file_error(
            path,
            format!(
                "cannot read table {table} with columns {}: {e}",
                names.join(", ")
            ),
        )
    })?;
    let mut rows = stmt.query([]).map_err(|e| file_error(path, e))?;
    let mut columns = vec![Vec::new(); d];
    let mut row_no = 0u64;
    while let Some(row) = rows.next().map_err(|e| file_error(path, e))? {
        row_no += 1;
        for (j, name) in names.iter().enumerate() {
            let v = match row.get_ref(j).map_err(|e| file_error(path, e))? {
                ValueRef::Real(v) => v,
                ValueRef::Integer(i) => i as f64,
                ValueRef::Null => {
                    return Err(StoreError::Row {
                        path: path.to_path_buf(),
                        row: row_no,
                        message: format!("column {name} is NULL"),
                    });
                }
                ValueRef::Text(t) => {
                    return Err(StoreError::Row {
                        path: path.to_path_buf(),
                        row: row_no,
                        message: format!(
                            "column {name} holds text {:?}, not a number",
                            String::from_utf8_lossy(t)
                        ),
                    });
                }
                ValueRef::Blob(_) => {
                    return Err(StoreError::Row {
                        path: path.to_path_buf(),
                        row: row_no,
                        message: format!("column {name} holds a blob, not a number"),
                    });
                }
            };
            columns[j].push(check_value(path, row_no, name, v)?);
        }
    }
    finish(path, columns)
}

/// Rows are numbered from 1 after the header line.
pub fn load_csv(path: &Path, d: usize) -> Result<Columns, StoreError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .map_err(|e| file_error(path, e))?;
    let names = column_names(d);
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| file_error(path, e))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    if header != names {
        return Err(file_error(
            path,
            format!(
                "header is {:?}, expected {:?}",
                header.join(","),
                names.join(",")
            ),
        ));
    }
    let mut columns = vec![Vec::new(); d];
    for (i, record) in reader.records().enumerate() {
        let row_no = i as u64 + 1;
        let record = record.map_err(|e| StoreError::Row {
            path: path.to_path_buf(),
            row: row_no,
            message: e.to_string(),
        })?;
        for (j, name) in names.iter().enumerate() {
            let field = record.get(j).unwrap_or("").trim();
            let v: f64 = field.parse().map_err(|_| StoreError::Row {
                path: path.to_path_buf(),
                row: row_no,
                message: format!("column {name}: {field:?} is not a number"),
            })?;
            columns[j].push(check_value(path, row_no, name, v)?);
        }
    }
    finish(path, columns)
}

/// Writes rows into a new SQLite file (used by simulations to give each party its store).
pub fn write_sqlite(path: &Path, table: &str, data: &Columns) -> Result<(), StoreError> {
    if path.exists() {
        return Err(file_error(
            path,
            "already exists; refusing to overwrite a data store",
        ));
    }
    let mut conn = rusqlite::Connection::open(path).map_err(|e| file_error(path, e))?;
    let names = column_names(data.d());
    let cols: Vec<String> = names.iter().map(|n| format!("{n} REAL NOT NULL")).collect();
    let placeholders = vec!["?"; data.d()].join(", ");
    let tx = conn.transaction().map_err(|e| file_error(path, e))?;
    tx.execute(&format!("CREATE TABLE {table} ({})", cols.join(", ")), [])
        .map_err(|e| file_error(path, e))?;
    {
        let mut stmt = tx
            .prepare(&format!(
                "INSERT INTO {table} ({}) VALUES ({placeholders})",
                names.join(", ")
            ))
            .map_err(|e| file_error(path, e))?;
        let mut row = vec![0.0; data.d()];
        for i in 0..data.n() {
            data.row_into(i, &mut row);
            stmt.execute(rusqlite::params_from_iter(row.iter()))
                .map_err(|e| file_error(path, e))?;
        }
    }
    tx.commit().map_err(|e| file_error(path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Columns {
        Columns::from_columns(vec![vec![1.0, 2.0, 3.0], vec![-1.0, 0.5, 4.0]]).unwrap()
    }

    #[test]
    fn sqlite_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.sqlite");
        write_sqlite(&path, "rows", &sample()).unwrap();
        let back = load_sqlite(&path, "rows", 2).unwrap();
        assert_eq!(back.col(0), sample().col(0));
        assert_eq!(back.col(1), sample().col(1));
        assert!(
            write_sqlite(&path, "rows", &sample()).is_err(),
            "must not overwrite"
        );
    }

    #[test]
    fn sqlite_bad_row_names_file_row_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.sqlite");
        write_sqlite(&path, "rows", &sample()).unwrap();
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("CREATE TABLE t2 (x1 REAL, x2)", []).unwrap();
        conn.execute("INSERT INTO t2 VALUES (1.0, 2.0), (1.0, 'abc')", [])
            .unwrap();
        let err = load_sqlite(&path, "t2", 2).unwrap_err().to_string();
        assert!(
            err.contains("rows.sqlite") && err.contains("row 2") && err.contains("x2"),
            "{err}"
        );
        conn.execute("CREATE TABLE t3 (x1 REAL, x2 REAL)", [])
            .unwrap();
        conn.execute("INSERT INTO t3 VALUES (1.0, NULL)", [])
            .unwrap();
        let err = load_sqlite(&path, "t3", 2).unwrap_err().to_string();
        assert!(err.contains("row 1") && err.contains("NULL"), "{err}");
        let err = load_sqlite(&path, "rows", 3).unwrap_err().to_string();
        assert!(err.contains("x3"), "{err}");
    }

    #[test]
    fn csv_bad_row_names_file_row_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.csv");
        std::fs::write(&path, "x1,x2\n1,2\n3,4\n5,inf\n").unwrap();
        let err = load_csv(&path, 2).unwrap_err().to_string();
        assert!(
            err.contains("rows.csv") && err.contains("row 3") && err.contains("finite"),
            "{err}"
        );
        std::fs::write(&path, "x1,x2\n1,2\n3,four\n").unwrap();
        let err = load_csv(&path, 2).unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("four"), "{err}");
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        assert!(
            load_csv(&path, 2)
                .unwrap_err()
                .to_string()
                .contains("header")
        );
        std::fs::write(&path, "x1,x2\n1,2\n3,4\n").unwrap();
        let ok = load_csv(&path, 2).unwrap();
        assert_eq!(ok.col(1), &[2.0, 4.0]);
    }
}
