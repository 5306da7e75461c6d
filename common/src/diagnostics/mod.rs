//! Convergence diagnostics and sample-quality measures for the run summary (DESIGN §5).
//!
//! R̂, bulk-ESS and tail-ESS follow Vehtari, Gelman, Simpson, Carpenter and Bürkner (2021),
//! "Rank-normalization, folding, and localization: an improved R̂ for assessing convergence of
//! MCMC", Bayesian Analysis 16(2), and reproduce ArviZ's `az.rhat(method="rank")` and
//! `az.ess(method="bulk" | "tail")` so that our numbers can be checked against a tool users
//! already trust. [`mmd`] is the sample-quality measure of the thesis (Sec. 5.3).
//!
//! Chain inputs are the draws of one scalar parameter, one slice per chain, all of the same
//! length (after warm-up); anything that derefs to `[f64]` works (`&[&[f64]]`, `&[Vec<f64>]`).

mod ess;
mod mmd;
mod rank;
mod rhat;
mod summary;

pub use ess::{ess_bulk, ess_tail};
pub use mmd::{mmd, mmd2_unbiased};
pub use rhat::rhat;
pub use summary::{Summary, quantile, summary};

use thiserror::Error;

/// Why a diagnostic could not be computed.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum DiagnosticsError {
    #[error("no chains were given")]
    NoChains,
    #[error("chain {index} has {len} draws but chain 0 has {expected}")]
    RaggedChains {
        index: usize,
        len: usize,
        expected: usize,
    },
    #[error("{got} draws per chain; at least {MIN_DRAWS} are needed to split chains")]
    TooFewDraws { got: usize },
    #[error("draws must be finite")]
    NonFinite,
    #[error("an MMD sample has {got} points; the unbiased statistic needs at least 2")]
    TooFewPoints { got: usize },
    #[error("points have dimension {got}, expected {expected}")]
    DimensionMismatch { got: usize, expected: usize },
    #[error("the median pairwise distance is {0}, so the Gaussian kernel bandwidth is unusable")]
    DegenerateBandwidth(f64),
}

/// ArviZ's minimum: each split half needs at least two draws for a variance.
pub const MIN_DRAWS: usize = 4;

/// Checks the chains are non-empty, of equal length, long enough and finite; returns the
/// number of draws per chain.
fn validate<C: AsRef<[f64]>>(chains: &[C]) -> Result<usize, DiagnosticsError> {
    let first = chains
        .first()
        .ok_or(DiagnosticsError::NoChains)?
        .as_ref()
        .len();
    for (index, chain) in chains.iter().enumerate() {
        let chain = chain.as_ref();
        if chain.len() != first {
            return Err(DiagnosticsError::RaggedChains {
                index,
                len: chain.len(),
                expected: first,
            });
        }
        if !chain.iter().all(|x| x.is_finite()) {
            return Err(DiagnosticsError::NonFinite);
        }
    }
    if first < MIN_DRAWS {
        return Err(DiagnosticsError::TooFewDraws { got: first });
    }
    Ok(first)
}
