//! Data sets in column-major layout. A party's hot loop (the clipped log-likelihood-ratio sum)
//! streams whole columns, so each column is one contiguous slice of a single allocation.
use std::sync::Arc;
use thiserror::Error;

/// Why a data set could not be built.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum DataError {
    #[error("column {column} has {len} rows, but column 0 has {expected}")]
    RaggedColumns {
        column: usize,
        len: usize,
        expected: usize,
    },
    #[error("row {row} has {len} values, expected {expected}")]
    RaggedRows {
        row: usize,
        len: usize,
        expected: usize,
    },
    #[error("{len} values cannot fill {n} rows x {d} columns")]
    WrongLength { len: usize, n: usize, d: usize },
    #[error("non-finite value {value} at row {row}, column {column}")]
    NonFinite {
        row: usize,
        column: usize,
        value: f64,
    },
    #[error("cannot concatenate data sets with {left} and {right} columns")]
    ColumnCountMismatch { left: usize, right: usize },
}

/// A column a model reads from a party's table: its name there and, where the model declares
/// them, its public bounds [lo, hi]. A party refuses at load a row whose value lies outside
/// them, so every row it holds is within them: what makes a model's log-ratios Lipschitz
/// with a public constant (see `Model::ratio_bound`).
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnSpec {
    pub name: String,
    pub bounds: Option<[f64; 2]>,
}

impl ColumnSpec {
    /// `x1 … xd`, unbounded: the columns of the models that read their rows by position.
    pub fn numbered(d: usize) -> Vec<ColumnSpec> {
        column_names(d)
            .into_iter()
            .map(|name| ColumnSpec { name, bounds: None })
            .collect()
    }
}

/// The names `x1 … xd`.
pub fn column_names(d: usize) -> Vec<String> {
    (1..=d).map(|j| format!("x{j}")).collect()
}

/// An `n × d` data set stored column-major: column `j` is `values[j*stride + start ..][..n]`.
/// Every value is finite (checked on construction), so per-row maths never meets NaN. The
/// values are shared and never change, so [`Columns::rows`] is a window on them, not a
/// copy: a big party's hot loops split their rows among threads that way.
#[derive(Clone, Debug, Default)]
pub struct Columns {
    n: usize,
    d: usize,
    /// Rows of the underlying buffer (its column length) and this window's first row.
    stride: usize,
    start: usize,
    values: Arc<[f64]>,
}

/// Equal when they hold the same rows, whatever buffer or window they are in.
impl PartialEq for Columns {
    fn eq(&self, other: &Self) -> bool {
        self.n == other.n && self.d == other.d && (0..self.d).all(|j| self.col(j) == other.col(j))
    }
}

impl Columns {
    /// From a column-major buffer of `n * d` values.
    pub fn from_column_major(n: usize, d: usize, values: Vec<f64>) -> Result<Self, DataError> {
        if n.checked_mul(d) != Some(values.len()) {
            return Err(DataError::WrongLength {
                len: values.len(),
                n,
                d,
            });
        }
        if let Some(k) = values.iter().position(|v| !v.is_finite()) {
            return Err(DataError::NonFinite {
                row: k % n,
                column: k / n,
                value: values[k],
            });
        }
        Ok(Columns::owning(n, d, values))
    }

    /// The whole of a column-major buffer whose values are already checked.
    fn owning(n: usize, d: usize, values: Vec<f64>) -> Columns {
        Columns {
            n,
            d,
            stride: n,
            start: 0,
            values: values.into(),
        }
    }

    /// Rows `range` of this set, sharing its values (no copy). Panics if the range is out
    /// of bounds.
    pub fn rows(&self, range: std::ops::Range<usize>) -> Columns {
        assert!(
            range.start <= range.end && range.end <= self.n,
            "rows {range:?} out of range for {} rows",
            self.n
        );
        Columns {
            n: range.end - range.start,
            d: self.d,
            stride: self.stride,
            start: self.start + range.start,
            values: Arc::clone(&self.values),
        }
    }

    /// From one vector per column; all columns must have the same length.
    pub fn from_columns(columns: Vec<Vec<f64>>) -> Result<Self, DataError> {
        let d = columns.len();
        let n = columns.first().map_or(0, Vec::len);
        if let Some((column, c)) = columns.iter().enumerate().find(|(_, c)| c.len() != n) {
            return Err(DataError::RaggedColumns {
                column,
                len: c.len(),
                expected: n,
            });
        }
        Self::from_column_major(n, d, columns.concat())
    }

    /// From rows of `d` values each (`d` is explicit so that an empty set has a width).
    pub fn from_rows<R: AsRef<[f64]>>(d: usize, rows: &[R]) -> Result<Self, DataError> {
        let n = rows.len();
        let mut values = vec![0.0; n * d];
        for (i, row) in rows.iter().enumerate() {
            let row = row.as_ref();
            if row.len() != d {
                return Err(DataError::RaggedRows {
                    row: i,
                    len: row.len(),
                    expected: d,
                });
            }
            for (j, &v) in row.iter().enumerate() {
                values[j * n + i] = v;
            }
        }
        Self::from_column_major(n, d, values)
    }

    /// Number of rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Number of columns.
    pub fn d(&self) -> usize {
        self.d
    }

    /// Column `j` as a contiguous slice of length `n`.
    pub fn col(&self, j: usize) -> &[f64] {
        assert!(j < self.d, "column {j} out of range for {} columns", self.d);
        let first = j * self.stride + self.start;
        &self.values[first..first + self.n]
    }

    /// Copy row `i` into `out` (length `d`), so row-wise callers need not allocate per row.
    pub fn row_into(&self, i: usize, out: &mut [f64]) {
        assert!(i < self.n, "row {i} out of range for {} rows", self.n);
        assert_eq!(out.len(), self.d, "row buffer length");
        for (j, o) in out.iter_mut().enumerate() {
            *o = self.col(j)[i];
        }
    }

    /// The rows at `rows` (in that order) as their own column-major set: a minibatch, gathered
    /// once so the per-row loop runs over contiguous columns. Panics on an index out of range.
    pub fn select(&self, rows: &[usize]) -> Columns {
        let mut values = Vec::with_capacity(rows.len() * self.d);
        for j in 0..self.d {
            let col = self.col(j);
            values.extend(rows.iter().map(|&i| col[i]));
        }
        // The values are already checked finite.
        Columns::owning(rows.len(), self.d, values)
    }

    /// Contiguous row ranges of near-equal size (the first `n % parts` get one row more), for
    /// splitting one data set into a simulated federation. Panics if `parts == 0`.
    pub fn split(&self, parts: usize) -> Vec<Columns> {
        assert!(parts > 0, "cannot split into 0 parts");
        let (base, extra) = (self.n / parts, self.n % parts);
        let mut start = 0;
        (0..parts)
            .map(|p| {
                let len = base + usize::from(p < extra);
                let values = (0..self.d)
                    .flat_map(|j| &self.col(j)[start..start + len])
                    .copied()
                    .collect();
                start += len;
                Columns::owning(len, self.d, values)
            })
            .collect()
    }

    /// Stack data sets row-wise (the inverse of [`Columns::split`]).
    pub fn concat(parts: &[Columns]) -> Result<Columns, DataError> {
        let d = parts.first().map_or(0, |p| p.d);
        if let Some(p) = parts.iter().find(|p| p.d != d) {
            return Err(DataError::ColumnCountMismatch {
                left: d,
                right: p.d,
            });
        }
        let n = parts.iter().map(|p| p.n).sum();
        let values = (0..d)
            .flat_map(|j| parts.iter().flat_map(move |p| p.col(j)))
            .copied()
            .collect();
        Ok(Columns::owning(n, d, values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Columns {
        Columns::from_rows(
            2,
            &[
                [1.0, 10.0],
                [2.0, 20.0],
                [3.0, 30.0],
                [4.0, 40.0],
                [5.0, 50.0],
            ],
        )
        .unwrap()
    }

    #[test]
    fn rows_and_columns_agree() {
        let c = sample();
        assert_eq!((c.n(), c.d()), (5, 2));
        assert_eq!(c.col(1), &[10.0, 20.0, 30.0, 40.0, 50.0]);
        let mut row = [0.0; 2];
        c.row_into(3, &mut row);
        assert_eq!(row, [4.0, 40.0]);
        let from_cols =
            Columns::from_columns(vec![vec![1.0, 2.0, 3.0, 4.0, 5.0], c.col(1).to_vec()]).unwrap();
        assert_eq!(from_cols, c);
    }

    #[test]
    fn a_window_of_rows_reads_like_a_copy_of_them() {
        let c = sample();
        let w = c.rows(1..4);
        assert_eq!((w.n(), w.d()), (3, 2));
        assert_eq!(w.col(0), &[2.0, 3.0, 4.0]);
        assert_eq!(w.col(1), &[20.0, 30.0, 40.0]);
        let mut row = [0.0; 2];
        w.row_into(2, &mut row);
        assert_eq!(row, [4.0, 40.0]);
        // A window of a window, a selection from one, and equality by content.
        let ww = w.rows(1..3);
        assert_eq!(ww.col(1), &[30.0, 40.0]);
        assert_eq!(w.select(&[2, 0]).col(0), &[4.0, 2.0]);
        assert_eq!(
            ww,
            Columns::from_rows(2, &[[3.0, 30.0], [4.0, 40.0]]).unwrap()
        );
        assert_eq!(c.rows(0..5), c);
        assert_eq!(c.rows(2..2).n(), 0);
        let parts = c.split(2);
        assert_eq!(Columns::concat(&[c.rows(0..3), c.rows(3..5)]).unwrap(), c);
        assert_eq!(parts[0], c.rows(0..3));
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn a_window_past_the_rows_panics() {
        sample().rows(3..6);
    }

    #[test]
    fn split_is_near_equal_and_concat_inverts_it() {
        let c = sample();
        let parts = c.split(3);
        assert_eq!(
            parts.iter().map(Columns::n).collect::<Vec<_>>(),
            vec![2, 2, 1]
        );
        assert_eq!(parts[1].col(1), &[30.0, 40.0]);
        assert_eq!(Columns::concat(&parts).unwrap(), c);
        assert_eq!(c.split(7).iter().map(Columns::n).sum::<usize>(), 5);
    }

    #[test]
    fn invalid_input_is_rejected_with_location() {
        assert_eq!(
            Columns::from_rows(2, &[vec![1.0, 2.0], vec![3.0, f64::NAN]])
                .unwrap_err()
                .to_string(),
            "non-finite value NaN at row 1, column 1"
        );
        assert_eq!(
            Columns::from_rows(2, &[vec![1.0, 2.0], vec![3.0]]),
            Err(DataError::RaggedRows {
                row: 1,
                len: 1,
                expected: 2
            })
        );
        assert_eq!(
            Columns::from_columns(vec![vec![1.0, 2.0], vec![3.0]]),
            Err(DataError::RaggedColumns {
                column: 1,
                len: 1,
                expected: 2
            })
        );
        assert!(matches!(
            Columns::from_columns(vec![vec![f64::INFINITY]]),
            Err(DataError::NonFinite {
                row: 0,
                column: 0,
                ..
            })
        ));
        assert_eq!(
            Columns::from_column_major(2, 2, vec![0.0; 3]),
            Err(DataError::WrongLength { len: 3, n: 2, d: 2 })
        );
        let other = Columns::from_rows(1, &[[1.0]]).unwrap();
        assert_eq!(
            Columns::concat(&[sample(), other]),
            Err(DataError::ColumnCountMismatch { left: 2, right: 1 })
        );
    }
}
