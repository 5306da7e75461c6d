//! Privacy measures as values, with their conversions to approximate DP made explicit (in the
//! manner of OpenDP's measures): the tight Gaussian PLD N(μ, 2μ), ρ-zCDP, a Rényi-DP curve and
//! a discretised PLD. Each is built by one accountant ([`super::Method`]), composes with a
//! measure of its own kind, and converts to (ε, δ) by [`Measure::epsilon`] / [`Measure::delta`].
use std::fmt;

use serde::Serialize;

use super::pld::PldPair;
use super::rdp::{RdpConversion, RdpCurve};
use super::{GaussianComposition, check_count, zcdp};
use crate::accountant::composition::CompositionError;

/// A privacy guarantee of a composition, in the measure of the accountant that produced it.
#[derive(Clone, Debug, PartialEq)]
pub enum Measure {
    /// Composed Gaussian releases summarised by μ; their privacy-loss distribution is exactly
    /// N(μ, 2μ) (Räisä 2020, Thm 3.2, 4.3).
    Gaussian(GaussianComposition),
    /// ρ-zCDP; ρ's add under composition (Räisä 2020, Thm 2.7(3)).
    Zcdp { rho: f64 },
    /// ε(α) on the grid of orders; ε's add per order (Mironov 2017 Prop 1).
    Rdp(RdpCurve),
    /// A pessimistically discretised PLD, both directions; composed by FFT convolution.
    Pld(PldPair),
}

impl Measure {
    /// Conversion to approximate DP: the smallest ε with δ(ε) ≤ `delta` (δ in (0, 1)).
    /// Gaussian: the tight curve (Thm 3.2); zCDP: ρ + 2√(ρ ln(1/δ)) (Thm 2.5); RDP: the
    /// improved conversion (Canonne, Kamath, Steinke 2020 Prop 12), minimised over the orders;
    /// PLD: the hockey-stick divergence of the discretised PLD, the worse direction.
    pub fn epsilon(&self, delta: f64) -> Result<f64, CompositionError> {
        Ok(match self {
            Measure::Gaussian(c) => super::Accountant::Analytic.epsilon(c, delta)?,
            Measure::Zcdp { rho } => zcdp::epsilon(*rho, delta)?,
            Measure::Rdp(curve) => curve.epsilon(delta, RdpConversion::Improved)?.epsilon,
            Measure::Pld(pld) => pld.epsilon(delta)?,
        })
    }

    /// Conversion to approximate DP the other way: δ at ε (finite, > 0), by the same results.
    pub fn delta(&self, epsilon: f64) -> Result<f64, CompositionError> {
        Ok(match self {
            Measure::Gaussian(c) => super::Accountant::Analytic.delta(c, epsilon)?,
            Measure::Zcdp { rho } => zcdp::delta(*rho, epsilon)?,
            Measure::Rdp(curve) => curve.delta(epsilon, RdpConversion::Improved)?.delta,
            Measure::Pld(pld) => pld.delta(epsilon)?,
        })
    }

    /// This guarantee followed by `count` independent copies of `other` (count ≥ 0; the PLD
    /// needs a whole number). Both must be the same kind of measure.
    pub fn compose(&self, other: &Measure, count: f64) -> Result<Measure, CompositionError> {
        check_count(count)?;
        Ok(match (self, other) {
            (Measure::Gaussian(a), Measure::Gaussian(b)) => {
                Measure::Gaussian(GaussianComposition::from_mu(a.mu() + count * b.mu())?)
            }
            (Measure::Zcdp { rho: a }, Measure::Zcdp { rho: b }) => {
                Measure::Zcdp { rho: a + count * b }
            }
            (Measure::Rdp(a), Measure::Rdp(b)) => {
                Measure::Rdp(RdpCurve::compose(&[(a, 1.0), (b, count)])?)
            }
            (Measure::Pld(a), Measure::Pld(b)) => {
                if count.fract() != 0.0 || count > u64::MAX as f64 {
                    return Err(CompositionError::FractionalCount(count));
                }
                Measure::Pld(a.compose(&b.self_compose(count as u64)?)?)
            }
            _ => return Err(CompositionError::MixedMeasures),
        })
    }
}

/// How far an accountant's answer may be from the exact one, as its documentation states it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum StatedError {
    /// Exact up to floating point: δ to this relative error (gaussian.rs, against mpmath).
    Exact { delta_relative: f64 },
    /// A valid upper bound on ε (δ), looser by the conversion; no discretisation error.
    UpperBound,
    /// Pessimistic discretisation (pld/mod.rs, "Error bound"): ε(δ) ≤ ε_PLD(δ) ≤
    /// ε(δ − `delta_shift`) + `epsilon_additive`.
    Discretisation {
        epsilon_additive: f64,
        delta_shift: f64,
    },
}

impl StatedError {
    /// The exact analytic curve's error (gaussian.rs: 1.4e-12 against 50-digit mpmath).
    pub(crate) const ANALYTIC: StatedError = StatedError::Exact {
        delta_relative: 1.4e-12,
    };
}

impl fmt::Display for StatedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatedError::Exact { delta_relative } => {
                write!(f, "exact up to {delta_relative:e} relative error in delta")
            }
            StatedError::UpperBound => {
                f.write_str("an upper bound on epsilon, with no discretisation error")
            }
            StatedError::Discretisation {
                epsilon_additive,
                delta_shift,
            } => write!(
                f,
                "never below the exact epsilon(delta), and at most epsilon(delta - \
                 {delta_shift:e}) + {epsilon_additive:e} (pessimistic discretisation)"
            ),
        }
    }
}
