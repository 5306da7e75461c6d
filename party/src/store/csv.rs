//! A CSV file with a header line `x1,…,xd`.
use std::path::Path;

use fedmcmc_common::data::Columns;

use super::{ColumnBuilder, StoreError};

/// Rows are numbered from 1 after the header line.
pub fn load_csv(path: &Path, d: usize) -> Result<Columns, StoreError> {
    let mut rows = ColumnBuilder::new(path.display(), d);
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .map_err(|e| rows.error(e))?;
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| rows.error(e))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    if header != rows.names() {
        return Err(rows.error(format!(
            "header is {:?}, expected {:?}",
            header.join(","),
            rows.names().join(",")
        )));
    }
    for record in reader.records() {
        rows.next_row();
        let record = record.map_err(|e| rows.refuse_row(e))?;
        for j in 0..d {
            let field = record.get(j).unwrap_or("").trim();
            let v: f64 = field
                .parse()
                .map_err(|_| rows.refuse(j, format!("holds {field:?}, not a number")))?;
            rows.push(j, v)?;
        }
    }
    rows.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

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
