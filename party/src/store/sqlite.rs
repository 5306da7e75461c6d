//! The default store: a table of an embedded SQLite database, read in `rowid` order.
use std::path::Path;

use fedmcmc_common::data::{ColumnSpec, Columns};
use rusqlite::types::ValueRef;

use super::{ColumnBuilder, StoreError, source_error};

/// Rows are numbered from 1 in table order (`rowid`). Integers are taken as numbers; text,
/// blobs and NULL are refused. The table may hold other columns besides `columns`.
pub fn load_sqlite(
    path: &Path,
    table: &str,
    columns: &[ColumnSpec],
) -> Result<Columns, StoreError> {
    let mut rows = ColumnBuilder::new(path.display(), columns);
    let d = rows.d();
    if !path.exists() {
        return Err(rows.error("no such file"));
    }
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| rows.error(e))?;
    if !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(rows.error(format!("invalid table name {table:?}")));
    }
    // Bracketed, so that a name that is also a keyword reads as a column; not in double
    // quotes, which SQLite reads as a string literal when no column has the name. A name is
    // an identifier (the model checks it), never SQL.
    let quoted: Vec<String> = rows.names().iter().map(|n| format!("[{n}]")).collect();
    let names = rows.names().join(", ");
    let sql = format!("SELECT {} FROM {table} ORDER BY rowid", quoted.join(", "));
    let mut stmt = conn.prepare(&sql).map_err(|e| {
        rows.error(format!(
            "cannot read table {table} with columns {names}: {e}"
        ))
    })?;
    let mut result = stmt.query([]).map_err(|e| rows.error(e))?;
    while let Some(row) = result.next().map_err(|e| rows.error(e))? {
        rows.next_row();
        for j in 0..d {
            let v = match row.get_ref(j).map_err(|e| rows.error(e))? {
                ValueRef::Real(v) => v,
                ValueRef::Integer(i) => i as f64,
                ValueRef::Null => return Err(rows.refuse(j, "is NULL")),
                ValueRef::Text(t) => {
                    return Err(rows.refuse(
                        j,
                        format!("holds text {:?}, not a number", String::from_utf8_lossy(t)),
                    ));
                }
                ValueRef::Blob(_) => return Err(rows.refuse(j, "holds a blob, not a number")),
            };
            rows.push(j, v)?;
        }
    }
    rows.finish()
}

/// Writes rows into a new SQLite file, one column of `data` under each of `names` (used by
/// simulations to give each party its store).
pub fn write_sqlite(
    path: &Path,
    table: &str,
    data: &Columns,
    names: &[String],
) -> Result<(), StoreError> {
    let error = |e: &dyn std::fmt::Display| source_error(path.display(), e);
    if path.exists() {
        return Err(error(&"already exists; refusing to overwrite a data store"));
    }
    assert_eq!(names.len(), data.d(), "one name per column");
    let mut conn = rusqlite::Connection::open(path).map_err(|e| error(&e))?;
    let cols: Vec<String> = names.iter().map(|n| format!("{n} REAL NOT NULL")).collect();
    let placeholders = vec!["?"; data.d()].join(", ");
    let tx = conn.transaction().map_err(|e| error(&e))?;
    tx.execute(&format!("CREATE TABLE {table} ({})", cols.join(", ")), [])
        .map_err(|e| error(&e))?;
    {
        let mut stmt = tx
            .prepare(&format!(
                "INSERT INTO {table} ({}) VALUES ({placeholders})",
                names.join(", ")
            ))
            .map_err(|e| error(&e))?;
        let mut row = vec![0.0; data.d()];
        for i in 0..data.n() {
            data.row_into(i, &mut row);
            stmt.execute(rusqlite::params_from_iter(row.iter()))
                .map_err(|e| error(&e))?;
        }
    }
    tx.commit().map_err(|e| error(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::column_names;

    fn sample() -> Columns {
        Columns::from_columns(vec![vec![1.0, 2.0, 3.0], vec![-1.0, 0.5, 4.0]]).unwrap()
    }

    #[test]
    fn sqlite_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.sqlite");
        write_sqlite(&path, "rows", &sample(), &column_names(2)).unwrap();
        let back = load_sqlite(&path, "rows", &ColumnSpec::numbered(2)).unwrap();
        assert_eq!(back.col(0), sample().col(0));
        assert_eq!(back.col(1), sample().col(1));
        assert!(
            write_sqlite(&path, "rows", &sample(), &column_names(2)).is_err(),
            "must not overwrite"
        );
    }

    #[test]
    fn sqlite_bad_row_names_file_row_and_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.sqlite");
        write_sqlite(&path, "rows", &sample(), &column_names(2)).unwrap();
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("CREATE TABLE t2 (x1 REAL, x2)", []).unwrap();
        conn.execute("INSERT INTO t2 VALUES (1.0, 2.0), (1.0, 'abc')", [])
            .unwrap();
        let err = load_sqlite(&path, "t2", &ColumnSpec::numbered(2))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rows.sqlite") && err.contains("row 2") && err.contains("x2"),
            "{err}"
        );
        conn.execute("CREATE TABLE t3 (x1 REAL, x2 REAL)", [])
            .unwrap();
        conn.execute("INSERT INTO t3 VALUES (1.0, NULL)", [])
            .unwrap();
        let err = load_sqlite(&path, "t3", &ColumnSpec::numbered(2))
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 1") && err.contains("NULL"), "{err}");
        let err = load_sqlite(&path, "rows", &ColumnSpec::numbered(3))
            .unwrap_err()
            .to_string();
        assert!(err.contains("x3"), "{err}");
    }

    /// A GLM's named, bounded columns, in the model's order, from a table holding others.
    fn glm_columns() -> Vec<ColumnSpec> {
        [
            ("age", [18.0, 90.0]),
            ("dose", [0.0, 5.0]),
            ("outcome", [0.0, 1.0]),
        ]
        .into_iter()
        .map(|(name, b)| ColumnSpec {
            name: name.into(),
            bounds: Some(b),
        })
        .collect()
    }

    #[test]
    fn sqlite_reads_named_columns_within_their_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clinic.sqlite");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE visits (id INTEGER, outcome INTEGER, note TEXT, dose REAL, age REAL);
             INSERT INTO visits VALUES (1, 0, 'a', 1.5, 40), (2, 1, 'b', 0.0, 18), (3, 1, NULL, 5.0, 90);",
        )
        .unwrap();
        let rows = load_sqlite(&path, "visits", &glm_columns()).unwrap();
        assert_eq!(rows.col(0), &[40.0, 18.0, 90.0]);
        assert_eq!(rows.col(1), &[1.5, 0.0, 5.0]);
        assert_eq!(rows.col(2), &[0.0, 1.0, 1.0]);

        conn.execute("INSERT INTO visits VALUES (4, 0, 'c', 5.5, 50)", [])
            .unwrap();
        let err = load_sqlite(&path, "visits", &glm_columns())
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("row 4: column dose is 5.5, outside its public bounds [0, 5]"),
            "{err}"
        );
        conn.execute_batch("CREATE TABLE partial (age REAL, outcome REAL)")
            .unwrap();
        let err = load_sqlite(&path, "partial", &glm_columns())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot read table partial with columns age, dose, outcome")
                && err.contains("no such column: dose"),
            "{err}"
        );
    }
}
