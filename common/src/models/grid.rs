//! A numerical reference posterior for two-dimensional models without a closed form, such as
//! the Gaussian mixture: the unnormalised log posterior ln p(θ) + Σ_x T·ℓ(x|θ) is evaluated at
//! the centres of a regular grid of cells over a box, and the posterior is approximated by the
//! piecewise-constant density that gives each cell its centre's share of the total (the
//! midpoint rule).
//!
//! The error shrinks with the cell size: the moments are midpoint-rule integrals, whose error is
//! O(h²) in the cell width h in general and far smaller for smooth densities that vanish
//! towards the box's edges (Euler–Maclaurin: the h² terms are boundary terms). Mass outside the
//! box is lost, which is why a box whose outer ring of cells holds more than [`MAX_EDGE_MASS`]
//! of the mass is refused. Building costs cells² × n likelihood evaluations.
use std::thread;

use rand::{Rng, RngExt};
use thiserror::Error;

use super::{ExactPosterior, Model};
use crate::data::Columns;

/// The largest share of the grid's mass its outer ring of cells may hold. More suggests the
/// posterior reaches past the box and its truncation biases the reference.
pub const MAX_EDGE_MASS: f64 = 1e-6;

/// Why a grid posterior could not be built.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum GridError {
    #[error("a grid posterior needs a model of dimension 2, got {0}")]
    NotTwoDimensional(usize),
    #[error("the data have {got} columns, the model expects {expected}")]
    DataColumns { expected: usize, got: usize },
    #[error("a grid needs at least 2 cells per axis, got {0}")]
    TooFewCells(usize),
    #[error("the box must be finite with lower < upper on each axis, got {lower:?} to {upper:?}")]
    BadBox { lower: [f64; 2], upper: [f64; 2] },
    #[error("the log posterior is {value} at θ = {theta:?}")]
    NonFinite { theta: [f64; 2], value: f64 },
    #[error("the posterior has no mass on the grid: its log density is −∞ at every cell centre")]
    NoMass,
    #[error(
        "the box is too small: its outer ring of cells holds {edge_mass:.3e} of the mass, more than {MAX_EDGE_MASS:e}"
    )]
    BoxTooSmall { edge_mass: f64 },
}

/// The grid approximation of a two-dimensional posterior (see the module documentation).
#[derive(Clone, Debug)]
pub struct GridPosterior {
    lower: [f64; 2],
    upper: [f64; 2],
    cells: usize,
    width: [f64; 2],
    /// Cell probabilities; cell (i, j), i along θ1 and j along θ2, is at i·cells + j.
    prob: Vec<f64>,
    /// Running sums of `prob`, searched to pick a cell.
    cdf: Vec<f64>,
    /// The last cell with positive probability, where a draw that rounding puts above the
    /// CDF's top lands.
    last_positive: usize,
    mean: [f64; 2],
    sd: [f64; 2],
    edge_mass: f64,
}

impl GridPosterior {
    /// Evaluate the tempered posterior of `model` given `data` on `cells_per_axis`² cells over
    /// the box [lower, upper]. The cells are spread over the available cores.
    pub fn new(
        model: &dyn Model,
        data: &Columns,
        lower: [f64; 2],
        upper: [f64; 2],
        cells_per_axis: usize,
    ) -> Result<Self, GridError> {
        if model.dim() != 2 {
            return Err(GridError::NotTwoDimensional(model.dim()));
        }
        if data.d() != model.row_dim() {
            return Err(GridError::DataColumns {
                expected: model.row_dim(),
                got: data.d(),
            });
        }
        if cells_per_axis < 2 {
            return Err(GridError::TooFewCells(cells_per_axis));
        }
        // Finite ends and a finite, positive width (which also excludes NaN).
        let box_ok = (0..2).all(|a| {
            let w = upper[a] - lower[a];
            lower[a].is_finite() && w.is_finite() && w > 0.0
        });
        if !box_ok {
            return Err(GridError::BadBox { lower, upper });
        }
        let cells = cells_per_axis;
        let width = [0, 1].map(|a| (upper[a] - lower[a]) / cells as f64);
        let centre = |a: usize, k: usize| lower[a] + (k as f64 + 0.5) * width[a];

        let log_post = log_posteriors(model, data, cells, &centre);
        if let Some(k) = log_post
            .iter()
            .position(|v| v.is_nan() || *v == f64::INFINITY)
        {
            return Err(GridError::NonFinite {
                theta: [centre(0, k / cells), centre(1, k % cells)],
                value: log_post[k],
            });
        }
        let max = log_post.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            return Err(GridError::NoMass);
        }
        let mut prob: Vec<f64> = log_post.iter().map(|v| (v - max).exp()).collect();
        let total: f64 = prob.iter().sum();
        prob.iter_mut().for_each(|p| *p /= total);

        let edge_mass: f64 = prob
            .iter()
            .enumerate()
            .filter(|&(k, _)| {
                let (i, j) = (k / cells, k % cells);
                i == 0 || j == 0 || i == cells - 1 || j == cells - 1
            })
            .map(|(_, p)| p)
            .sum();
        if edge_mass > MAX_EDGE_MASS {
            return Err(GridError::BoxTooSmall { edge_mass });
        }

        let moment = |f: &dyn Fn(usize, usize) -> f64| -> f64 {
            prob.iter()
                .enumerate()
                .map(|(k, p)| p * f(k / cells, k % cells))
                .sum()
        };
        let mean = [moment(&|i, _| centre(0, i)), moment(&|_, j| centre(1, j))];
        let sd = [
            moment(&|i, _| (centre(0, i) - mean[0]).powi(2)).sqrt(),
            moment(&|_, j| (centre(1, j) - mean[1]).powi(2)).sqrt(),
        ];
        let cdf: Vec<f64> = prob
            .iter()
            .scan(0.0, |acc, p| {
                *acc += p;
                Some(*acc)
            })
            .collect();
        let last_positive = prob
            .iter()
            .rposition(|&p| p > 0.0)
            .expect("the cell at the maximum has probability > 0");
        Ok(GridPosterior {
            lower,
            upper,
            cells,
            width,
            prob,
            cdf,
            last_positive,
            mean,
            sd,
            edge_mass,
        })
    }

    /// The cell widths along θ1 and θ2.
    pub fn cell_width(&self) -> [f64; 2] {
        self.width
    }

    /// The share of the mass in the outer ring of cells (at most [`MAX_EDGE_MASS`]).
    pub fn edge_mass(&self) -> f64 {
        self.edge_mass
    }

    /// Every cell's centre and probability, θ2 varying fastest.
    pub fn cells(&self) -> impl Iterator<Item = ([f64; 2], f64)> + '_ {
        self.prob.iter().enumerate().map(|(k, &p)| {
            let (i, j) = (k / self.cells, k % self.cells);
            ([self.centre(0, i), self.centre(1, j)], p)
        })
    }

    fn centre(&self, axis: usize, k: usize) -> f64 {
        self.lower[axis] + (k as f64 + 0.5) * self.width[axis]
    }

    /// The cell holding θ, or `None` outside the (closed) box.
    fn cell_of(&self, theta: &[f64]) -> Option<usize> {
        assert_eq!(theta.len(), 2, "θ has dimension 2");
        let mut index = [0; 2];
        for (a, k) in index.iter_mut().enumerate() {
            let t = theta[a];
            // Written so that NaN is outside.
            if !(t >= self.lower[a] && t <= self.upper[a]) {
                return None;
            }
            *k = (((t - self.lower[a]) / self.width[a]) as usize).min(self.cells - 1);
        }
        Some(index[0] * self.cells + index[1])
    }
}

/// The unnormalised log posterior at every cell centre, in the layout of
/// [`GridPosterior::prob`]. The rows are copied once, row-major, so that the per-cell loop
/// reads each row as a slice and allocates nothing; each thread takes a band of θ1 values.
fn log_posteriors(
    model: &dyn Model,
    data: &Columns,
    cells: usize,
    centre: &(dyn Fn(usize, usize) -> f64 + Sync),
) -> Vec<f64> {
    let (n, d) = (data.n(), data.d());
    let mut rows = vec![0.0; n * d];
    for r in 0..n {
        data.row_into(r, &mut rows[r * d..(r + 1) * d]);
    }
    let rows = &rows;
    let threads = thread::available_parallelism().map_or(1, |t| t.get());
    let band = cells.div_ceil(threads.min(cells));
    let mut log_post = vec![0.0; cells * cells];
    thread::scope(|s| {
        for (b, chunk) in log_post.chunks_mut(band * cells).enumerate() {
            s.spawn(move || {
                for (k, out) in chunk.iter_mut().enumerate() {
                    let theta = [centre(0, b * band + k / cells), centre(1, k % cells)];
                    let lik: f64 = (0..n)
                        .map(|r| model.log_lik_row(&theta, &rows[r * d..(r + 1) * d]))
                        .sum();
                    *out = model.log_prior(&theta) + lik;
                }
            });
        }
    });
    log_post
}

impl ExactPosterior for GridPosterior {
    /// A cell by its probability, then a uniform point in it: a draw from the
    /// piecewise-constant density, whose variance along each axis exceeds `sd()²` by h²/12.
    fn sample(&self, rng: &mut dyn Rng) -> Vec<f64> {
        let u = rng.random::<f64>() * self.cdf[self.cdf.len() - 1];
        let k = self
            .cdf
            .partition_point(|&c| c <= u)
            .min(self.last_positive);
        let (i, j) = (k / self.cells, k % self.cells);
        vec![
            self.lower[0] + (i as f64 + rng.random::<f64>()) * self.width[0],
            self.lower[1] + (j as f64 + rng.random::<f64>()) * self.width[1],
        ]
    }

    /// Midpoint-rule posterior mean.
    fn mean(&self) -> Vec<f64> {
        self.mean.to_vec()
    }

    /// Midpoint-rule marginal standard deviations: estimates of the posterior's, so without the
    /// h²/12 per axis by which the piecewise-constant density's variance exceeds them.
    fn sd(&self) -> Vec<f64> {
        self.sd.to_vec()
    }

    /// ln of the piecewise-constant density: the cell's probability over its area; −∞
    /// outside the box.
    fn log_density(&self, theta: &[f64]) -> f64 {
        self.cell_of(theta).map_or(f64::NEG_INFINITY, |k| {
            self.prob[k].ln() - (self.width[0] * self.width[1]).ln()
        })
    }
}
