//! Rényi-DP accounting (docs/design.md §3 "Accounting for a party", issue 4 item 4).
//!
//! An [`RdpCurve`] is ε(α) on one fixed grid of orders ([`RdpCurve::orders`]). Curves of
//! releases add under composition (Mironov 2017 Prop 1; Räisä 2020, Thm 2.7(2)), also across
//! different mechanisms ([`RdpCurve::compose`]), and turn into (ε, δ) statements by minimising a
//! conversion over the grid ([`RdpCurve::epsilon`], [`RdpCurve::delta`]). Mechanisms:
//!
//! * the Gaussian mechanism, ε(α) = α/(2s²) (Mironov 2017 Prop 7), under either relation;
//! * the Poisson-subsampled Gaussian, add/remove neighbours (Mironov, Talwar, Zhang 2019);
//! * the Gaussian on a batch of fixed size drawn without replacement, substitute neighbours
//!   (Wang, Balle, Kasiviswanathan 2019 Thm 9 as quoted in Räisä 2020, Thm 3.5, tightened by
//!   their Thm 27 where that is smaller);
//! * DP Barker (Räisä 2020, Thm 3.3), substitute neighbours.
//!
//! The numbers follow Google's `dp_accounting.rdp` 0.6.0 formula by formula, so that an
//! analyst can reproduce a party's answer there (tests/rdp.rs checks them against it).
//! Entries are +∞ where no bound is known (DP Barker off its orders, a fractional-order series
//! that did not converge); the conversions simply never pick such an order.
mod poisson;
mod without_replacement;

use std::sync::LazyLock;

use super::{AccountantError, check_count, check_delta, check_epsilon, check_noise_multiplier};
use crate::neighbours::Neighbours;

/// Invalid input to the RDP accountant; each message is one sentence naming the bad value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RdpError {
    #[error(transparent)]
    Accountant(#[from] AccountantError),
    #[error("the sampling rate must lie between 0 and 1, got {0}")]
    InvalidSamplingRate(f64),
    #[error(
        "the batch must hold between 1 and all {population} rows of the population, got {batch}"
    )]
    InvalidBatch { batch: u64, population: u64 },
    #[error(
        "the DP Barker bound (Räisä 2020, Thm 3.3) needs orders 2 < α < b/5, so a batch of at \
         least 16 rows, got {0}"
    )]
    BarkerBatchTooSmall(u64),
    #[error(
        "cannot compose releases accounted under add/remove neighbours with releases accounted \
         under substitute neighbours"
    )]
    MixedNeighbours,
}

/// The orders of every curve: dp_accounting's default fractional orders 1.1, 1.2, …, 10.9
/// (which include 2, …, 10), then every integer 11..=256 so that the optimal integer order of
/// the integer-only bounds is on the grid (for DP Barker, whose orders stop below b/5, that
/// covers every batch up to 1285 rows), then 512 and 1024 as in dp_accounting.
static ORDERS: LazyLock<Vec<f64>> = LazyLock::new(|| {
    (1..100)
        .map(|x| 1.0 + f64::from(x) / 10.0)
        .chain((11..=256).map(f64::from))
        .chain([512.0, 1024.0])
        .collect()
});

/// The largest integer order of the dense part of the grid.
const MAX_DENSE_ORDER: u32 = 256;
/// The smallest DP Barker batch accounted: Räisä 2020, Thm 3.3 holds only at the integer
/// orders 2 < α < b/5, and below 16 rows too few are left to convert.
pub const MIN_BARKER_BATCH: u64 = 16;

/// ε(α) on the grid [`RdpCurve::orders`], with the neighbour relation it holds under (`None`:
/// either, as for the plain Gaussian whose multiplier the caller took under its relation).
#[derive(Clone, Debug, PartialEq)]
pub struct RdpCurve {
    epsilons: Vec<f64>,
    neighbours: Option<Neighbours>,
}

/// How RDP turns into approximate DP at one order α > 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RdpConversion {
    /// Mironov 2017 Prop 3 (Räisä 2020, Thm 2.5): ε = ε(α) + ln(1/δ)/(α−1).
    Mironov,
    /// Canonne, Kamath, Steinke 2020 Prop 12 / Balle et al. 2020 Thm 21:
    /// ε = ε(α) + ln((α−1)/α) − (ln δ + ln α)/(α−1), together with the total-variation bound
    /// δ(0) ≤ √(1 − e^{−ε(α)}) (Bretagnolle–Huber, as KL ≤ D_α), as dp_accounting's
    /// `compute_epsilon` / `compute_delta`. Never looser than [`RdpConversion::Mironov`].
    #[default]
    Improved,
}

/// An ε at some δ and the order that gave it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpsilonBound {
    pub epsilon: f64,
    pub order: f64,
}

/// A δ at some ε and the order that gave it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeltaBound {
    pub delta: f64,
    pub order: f64,
}

impl RdpCurve {
    /// The orders α, ascending, shared by all curves.
    pub fn orders() -> &'static [f64] {
        &ORDERS
    }

    /// ε(α) per order of [`RdpCurve::orders`]; +∞ where no bound is known.
    pub fn epsilons(&self) -> &[f64] {
        &self.epsilons
    }

    /// The neighbour relation the curve holds under; `None` when it holds under either.
    pub fn neighbours(&self) -> Option<Neighbours> {
        self.neighbours
    }

    /// One Gaussian release with noise multiplier s (noise std / L2 sensitivity under the
    /// caller's relation): ε(α) = α/(2s²) (Mironov 2017 Prop 7; Räisä 2020, Thm 2.11(2)).
    pub fn gaussian(noise_multiplier: f64) -> Result<Self, RdpError> {
        check_noise_multiplier(noise_multiplier)?;
        Ok(Self::from_fn(None, |a| gaussian_rdp(noise_multiplier, a)))
    }

    /// One Gaussian release on a Poisson subsample (each row kept with probability q),
    /// add/remove neighbours, multiplier s under add/remove (Mironov, Talwar, Zhang 2019).
    pub fn poisson_gaussian(noise_multiplier: f64, sampling_rate: f64) -> Result<Self, RdpError> {
        check_noise_multiplier(noise_multiplier)?;
        if !(0.0..=1.0).contains(&sampling_rate) {
            return Err(RdpError::InvalidSamplingRate(sampling_rate));
        }
        Ok(Self::from_fn(Some(Neighbours::AddRemove), |a| {
            poisson::rdp(sampling_rate, noise_multiplier, a)
        }))
    }

    /// One Gaussian release on a batch of `batch` rows drawn without replacement from
    /// `population`, substitute neighbours, multiplier s under substitution (WBK19 Thm 9/27,
    /// Räisä 2020, Thm 3.5; fractional orders by their Cor 10).
    pub fn batch_gaussian(
        noise_multiplier: f64,
        batch: u64,
        population: u64,
    ) -> Result<Self, RdpError> {
        check_noise_multiplier(noise_multiplier)?;
        let q = sampling_fraction(batch, population)?;
        let gaussian = without_replacement::SubsampledGaussian::new(q, noise_multiplier);
        Ok(Self::from_fn(Some(Neighbours::Substitute), |a| {
            gaussian.rdp(a)
        }))
    }

    /// One iteration of DP Barker with a batch of b rows out of n, noise variance 2 and
    /// per-row log-likelihood ratios bounded by √b/n (the caller's clipping or tempering
    /// guarantees that), substitute neighbours: Räisä 2020, Thm 3.3, finite only at the integer
    /// orders 2 < α < b/5, so converting picks the optimal integer order there.
    pub fn dp_barker(batch: u64, population: u64) -> Result<Self, RdpError> {
        let q = sampling_fraction(batch, population)?;
        if batch < MIN_BARKER_BATCH {
            return Err(RdpError::BarkerBatchTooSmall(batch));
        }
        Ok(Self::from_fn(Some(Neighbours::Substitute), |a| {
            without_replacement::barker_rdp(q, batch as f64, a)
        }))
    }

    /// The composition of `count` releases of each curve (Mironov 2017 Prop 1): ε's add per
    /// order. Counts may be fractional (the max-releases bisection of Räisä 2020, Alg. 2 needs
    /// that); a count of 0 contributes nothing. Curves under different relations don't mix.
    pub fn compose(parts: &[(&RdpCurve, f64)]) -> Result<Self, RdpError> {
        let mut total = vec![0.0; ORDERS.len()];
        let mut neighbours = None;
        for &(curve, count) in parts {
            check_count(count)?;
            if count == 0.0 {
                continue; // also keeps 0·∞ out of the sum
            }
            match (neighbours, curve.neighbours) {
                (Some(a), Some(b)) if a != b => return Err(RdpError::MixedNeighbours),
                (None, b) => neighbours = b,
                _ => {}
            }
            for (t, e) in total.iter_mut().zip(&curve.epsilons) {
                *t += count * e;
            }
        }
        Ok(Self {
            epsilons: total,
            neighbours,
        })
    }

    /// The smallest ε over the orders with which the curve is (ε, δ)-DP, and that order
    /// (the first on ties); +∞ if every order is +∞. δ in (0, 1).
    pub fn epsilon(&self, delta: f64, conversion: RdpConversion) -> Result<EpsilonBound, RdpError> {
        check_delta(delta)?;
        let (epsilon, order) = self.best(|a, r| match conversion {
            RdpConversion::Mironov => r - delta.ln() / (a - 1.0),
            RdpConversion::Improved if delta * delta + (-r).exp_m1() > 0.0 => 0.0,
            RdpConversion::Improved => r + (-1.0 / a).ln_1p() - (delta * a).ln() / (a - 1.0),
        });
        Ok(EpsilonBound {
            epsilon: epsilon.max(0.0),
            order,
        })
    }

    /// The smallest δ over the orders with which the curve is (ε, δ)-DP, and that order
    /// (dp_accounting's `compute_delta` for [`RdpConversion::Improved`]). ε finite and > 0.
    pub fn delta(&self, epsilon: f64, conversion: RdpConversion) -> Result<DeltaBound, RdpError> {
        check_epsilon(epsilon)?;
        let (ln_delta, order) = self.best(|a, r| match conversion {
            RdpConversion::Mironov => (a - 1.0) * (r - epsilon),
            RdpConversion::Improved => {
                let tv = if r == 0.0 {
                    f64::NEG_INFINITY
                } else {
                    0.5 * (-(-r).exp()).ln_1p()
                };
                tv.min((a - 1.0) * (r - epsilon + (-1.0 / a).ln_1p()) - a.ln())
            }
        });
        Ok(DeltaBound {
            delta: ln_delta.exp().min(1.0),
            order,
        })
    }

    fn from_fn(neighbours: Option<Neighbours>, rdp: impl Fn(f64) -> f64) -> Self {
        Self {
            epsilons: ORDERS.iter().map(|&a| rdp(a)).collect(),
            neighbours,
        }
    }

    /// The minimum of `bound(α, ε(α))` over the grid and its order (first on ties, as
    /// numpy's argmin).
    fn best(&self, bound: impl Fn(f64, f64) -> f64) -> (f64, f64) {
        let mut best = (f64::INFINITY, ORDERS[0]);
        for (&a, &r) in ORDERS.iter().zip(&self.epsilons) {
            let b = bound(a, r);
            if b < best.0 {
                best = (b, a);
            }
        }
        best
    }
}

/// ε(α) = α/(2s²) of the Gaussian mechanism.
fn gaussian_rdp(noise_multiplier: f64, order: f64) -> f64 {
    order / (2.0 * noise_multiplier * noise_multiplier)
}

/// q = b/n for a batch of b out of n rows, 1 ≤ b ≤ n.
fn sampling_fraction(batch: u64, population: u64) -> Result<f64, RdpError> {
    if batch == 0 || batch > population {
        return Err(RdpError::InvalidBatch { batch, population });
    }
    Ok(batch as f64 / population as f64)
}

/// ln(e^x + e^y) without overflow (dp_accounting's `_log_add`).
fn log_add(x: f64, y: f64) -> f64 {
    let (a, b) = (x.min(y), x.max(y));
    if a == f64::NEG_INFINITY {
        b
    } else {
        (a - b).exp().ln_1p() + b
    }
}

/// ln C(n, k) through ln Γ (for fractional n, ln |C(n, k)|).
fn ln_binomial(n: f64, k: f64) -> f64 {
    libm::lgamma(n + 1.0) - libm::lgamma(k + 1.0) - libm::lgamma(n - k + 1.0)
}
