//! A CSV file with a header line naming its columns; those the model reads (`x1,…,xd`, or a
//! GLM's features and label) are found by name, in any order among others.
use std::path::Path;

use fedmcmc_common::data::{ColumnSpec, Columns};

use super::{ColumnBuilder, StoreError};

/// Rows are numbered from 1 after the header line.
pub fn load_csv(path: &Path, columns: &[ColumnSpec]) -> Result<Columns, StoreError> {
    let mut rows = ColumnBuilder::new(path.display(), columns);
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
    if let Some(twice) = header
        .iter()
        .enumerate()
        .find_map(|(i, h)| header[..i].contains(h).then_some(h))
    {
        return Err(rows.error(format!("the header names column {twice} twice")));
    }
    // Where each of the model's columns is in a record.
    let positions = rows
        .names()
        .iter()
        .map(|name| {
            header.iter().position(|h| h == name).ok_or_else(|| {
                rows.error(format!(
                    "the header {:?} has no column {name} (the model reads {:?})",
                    header.join(","),
                    rows.names().join(",")
                ))
            })
        })
        .collect::<Result<Vec<usize>, _>>()?;
    for record in reader.records() {
        rows.next_row();
        let record = record.map_err(|e| rows.refuse_row(e))?;
        for (j, &k) in positions.iter().enumerate() {
            let field = record.get(k).unwrap_or("").trim();
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
        let err = load_csv(&path, &ColumnSpec::numbered(2))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rows.csv") && err.contains("row 3") && err.contains("finite"),
            "{err}"
        );
        std::fs::write(&path, "x1,x2\n1,2\n3,four\n").unwrap();
        let err = load_csv(&path, &ColumnSpec::numbered(2))
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 2") && err.contains("four"), "{err}");
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        assert!(
            load_csv(&path, &ColumnSpec::numbered(2))
                .unwrap_err()
                .to_string()
                .contains("no column x1")
        );
        std::fs::write(&path, "x1,x2\n1,2\n3,4\n").unwrap();
        let ok = load_csv(&path, &ColumnSpec::numbered(2)).unwrap();
        assert_eq!(ok.col(1), &[2.0, 4.0]);
    }

    #[test]
    fn csv_reads_named_columns_by_header_within_their_bounds() {
        let columns: Vec<ColumnSpec> = [("age", [18.0, 90.0]), ("outcome", [0.0, 1.0])]
            .into_iter()
            .map(|(name, b)| ColumnSpec {
                name: name.into(),
                bounds: Some(b),
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clinic.csv");
        std::fs::write(&path, "id,outcome,note,age\n1,0,x,40\n2,1,,18.5\n").unwrap();
        let rows = load_csv(&path, &columns).unwrap();
        assert_eq!(
            (rows.col(0), rows.col(1)),
            (&[40.0, 18.5][..], &[0.0, 1.0][..])
        );
        std::fs::write(&path, "id,outcome,age\n1,0,40\n2,2,50\n").unwrap();
        let err = load_csv(&path, &columns).unwrap_err().to_string();
        assert!(
            err.ends_with("row 2: column outcome is 2, outside its public bounds [0, 1]"),
            "{err}"
        );
        std::fs::write(&path, "id,outcome\n1,0\n").unwrap();
        let err = load_csv(&path, &columns).unwrap_err().to_string();
        assert!(
            err.ends_with(
                "the header \"id,outcome\" has no column age (the model reads \"age,outcome\")"
            ),
            "{err}"
        );
        std::fs::write(&path, "age,outcome,age\n1,0,2\n").unwrap();
        let err = load_csv(&path, &columns).unwrap_err().to_string();
        assert!(err.ends_with("the header names column age twice"), "{err}");
    }
}
