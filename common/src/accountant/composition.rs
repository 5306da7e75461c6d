//! Compositions of releases of any of the sampler's mechanisms, which accountant covers which,
//! and each accountant's solvers over them: the most releases that fit and the least noise
//! that fits (Räisä 2020, Alg. 2 generalised from μ to any [`Measure`]); `choice.rs` picks
//! the accountant that answers.
//!
//! Coverage ([`Method`]): `analytic` and `zcdp` take plain Gaussian releases only (either
//! relation; the multiplier is taken under the chosen one). `pld` takes all three mechanisms
//! under both relations: Poisson pairs, and for batches drawn without replacement the
//! symmetrised pair of Dong, Roth, Su 2022 Thm 4.2 under substitution and the Poisson
//! add/remove pair at rate b/n and multiplier s/2 under add/remove (see
//! [`pld::Mechanism::BatchGaussian`]). `rdp` takes Gaussian; Poisson under add/remove
//! (Mironov, Talwar, Zhang 2019); batches under substitution (Wang, Balle, Kasiviswanathan
//! 2019 Thm 9/27) and under add/remove (that same Poisson pair); it refuses Poisson under
//! substitution, for which no Rényi bound is implemented. DP Barker iterations (Räisä 2020,
//! Thm 3.3) are covered by `rdp` alone, under substitution. The
//! Poisson-substitute pair (rows at ∓½ around a common centre) must not stand in for a batch:
//! with every other row at −½ and the differing row +½ vs −½, a batch without replacement
//! gives exactly (1−γ)N(0, s²) + γN(1, s²) against N(0, s²), which it under-reports.
//! `best` is the tightest of the accountants that cover a composition; every one of them is a
//! valid upper bound (up to its [`StatedError`]), so their minimum is too.
use std::fmt;

use serde::Serialize;

use super::cancel::Cancel;
use super::measure::{Measure, StatedError};
use super::pld::{self, PldConfig, PldError, PldPair};
use super::rdp::{RdpCurve, RdpError};
use super::release::{MechanismKind, Release};
use super::solve::{first_fitting, last_fitting};
use super::{Accountant, AccountantError, GaussianComposition, MAX_EXACT_COUNT};
use crate::neighbours::Neighbours;

/// Bad input, or a composition an accountant does not cover; each message is one sentence.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompositionError {
    #[error(transparent)]
    Accountant(#[from] AccountantError),
    #[error(transparent)]
    Rdp(#[from] RdpError),
    #[error(transparent)]
    Pld(#[from] PldError),
    #[error("the sampling rate must lie in (0, 1], got {0}")]
    InvalidSamplingRate(f64),
    #[error(
        "the batch must hold between 1 and all {population} rows of the population, got {batch}"
    )]
    InvalidBatch { batch: u64, population: u64 },
    #[error("{0}")]
    InvalidRelease(String),
    #[error(
        "the {method} accountant does not cover {mechanism} releases under {neighbours} \
         neighbours: {reason}"
    )]
    Unsupported {
        method: &'static str,
        mechanism: &'static str,
        neighbours: &'static str,
        reason: &'static str,
    },
    #[error("the pld accountant needs whole release counts, got {0}")]
    FractionalCount(f64),
    #[error("only privacy measures of the same kind compose")]
    MixedMeasures,
    #[error("the fixed releases alone already exceed the (epsilon, delta) budget")]
    PrefixExceedsBudget,
    #[error("the smallest noise multiplier that fits lies outside [{0:e}, {1:e}]")]
    NoiseOutOfRange(f64, f64),
    #[error("the calibration was stopped before it finished: the process is shutting down")]
    Cancelled,
    #[error(
        "DP Barker's noise is fixed by its total variance C (Räisä 2020, Thm 3.3), so there is \
         no noise multiplier to calibrate"
    )]
    FixedNoise,
    #[error("unknown accountant '{0}', expected 'analytic', 'zcdp', 'rdp', 'pld' or 'best'")]
    UnknownAccountant(String),
}

/// Independent releases on the same data, all under one neighbour relation.
#[derive(Clone, Debug, PartialEq)]
pub struct Composition {
    releases: Vec<Release>,
    neighbours: Neighbours,
}

impl Composition {
    pub fn new(releases: Vec<Release>, neighbours: Neighbours) -> Result<Self, CompositionError> {
        for r in &releases {
            r.validate()?;
        }
        Ok(Self {
            releases,
            neighbours,
        })
    }

    pub fn releases(&self) -> &[Release] {
        &self.releases
    }

    pub fn neighbours(&self) -> Neighbours {
        self.neighbours
    }

    /// This composition followed by `release`.
    pub fn then(&self, release: Release) -> Result<Self, CompositionError> {
        release.validate()?;
        let mut releases = self.releases.clone();
        releases.push(release);
        Ok(Self {
            releases,
            neighbours: self.neighbours,
        })
    }

    /// The plain-Gaussian summary μ = Σ count/(2s²), if every release is plain Gaussian.
    pub fn gaussian(&self) -> Option<GaussianComposition> {
        let parts: Option<Vec<_>> = self
            .releases
            .iter()
            .map(|r| {
                (r.mechanism == MechanismKind::Gaussian).then_some((r.count, r.noise_multiplier))
            })
            .collect();
        GaussianComposition::from_releases(&parts?).ok()
    }
}

/// One accountant for compositions of releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// The tight Gaussian PLD ([`Accountant::Analytic`]); plain Gaussian releases only.
    Analytic,
    /// zCDP ([`Accountant::Zcdp`]); plain Gaussian releases only.
    Zcdp,
    /// Rényi DP ([`RdpCurve`]) with the improved conversion.
    Rdp,
    /// The numerical PLD ([`PldPair`]) with dp_accounting's default discretisation.
    Pld,
}

impl Method {
    /// In the order ties are resolved for [`Choice::Best`](super::Choice::Best).
    pub const ALL: [Method; 4] = [Method::Analytic, Method::Zcdp, Method::Rdp, Method::Pld];

    /// The μ-based accountant behind this method, for plain Gaussian releases.
    fn gaussian(self) -> Option<Accountant> {
        match self {
            Method::Analytic => Some(Accountant::Analytic),
            Method::Zcdp => Some(Accountant::Zcdp),
            Method::Rdp | Method::Pld => None,
        }
    }

    /// The short name used on the command line.
    pub fn key(self) -> &'static str {
        match self.gaussian() {
            Some(a) => a.key(),
            None if self == Method::Rdp => "rdp",
            None => "pld",
        }
    }

    /// What the method is and which results it rests on, for reports.
    pub fn name(self) -> &'static str {
        match self.gaussian() {
            Some(a) => a.name(),
            None if self == Method::Rdp => {
                "rdp-improved-conversion (Mironov 2017 Prop 1, 7; Mironov-Talwar-Zhang 2019; \
                 Wang-Balle-Kasiviswanathan 2019 Thm 9, 27; Canonne-Kamath-Steinke 2020 Prop 12)"
            }
            None => {
                "pld-connect-the-dots-fft (Koskela et al. 2020; Doroshenko et al. 2022 Alg. 1; \
                 batches without replacement: Dong-Roth-Su 2022 Thm 4.2)"
            }
        }
    }

    /// The error bound this accountant states for `composition`.
    pub fn stated_error(self, composition: &Composition) -> StatedError {
        match self {
            Method::Analytic => StatedError::ANALYTIC,
            Method::Zcdp | Method::Rdp => StatedError::UpperBound,
            Method::Pld => {
                let k: f64 = composition.releases.iter().map(|r| r.count).sum();
                // Each release group is one self-composition and one composition.
                let steps = 2.0 * composition.releases.len() as f64;
                let bound = PldConfig::default().error_bound(k, steps);
                StatedError::Discretisation {
                    epsilon_additive: bound.epsilon_additive,
                    delta_shift: bound.delta_shift,
                }
            }
        }
    }

    fn unsupported(
        self,
        mechanism: MechanismKind,
        neighbours: Neighbours,
        reason: &'static str,
    ) -> CompositionError {
        CompositionError::Unsupported {
            method: self.key(),
            mechanism: mechanism.name(),
            neighbours: neighbours.as_str(),
            reason,
        }
    }

    /// The measure of one release, or why this accountant does not cover it.
    fn release_measure(
        self,
        mechanism: MechanismKind,
        noise_multiplier: f64,
        neighbours: Neighbours,
    ) -> Result<Measure, CompositionError> {
        use MechanismKind::*;
        let s = noise_multiplier;
        let pld_measure = |m: pld::Mechanism| {
            PldPair::from_mechanism(&m, neighbours, PldConfig::default()).map(Measure::Pld)
        };
        Ok(match (self, mechanism) {
            (Method::Analytic, Gaussian) => {
                Measure::Gaussian(GaussianComposition::from_releases(&[(1.0, s)])?)
            }
            (Method::Zcdp, Gaussian) => Measure::Zcdp {
                rho: GaussianComposition::from_releases(&[(1.0, s)])?.mu(),
            },
            (Method::Analytic | Method::Zcdp, _) => {
                return Err(self.unsupported(
                    mechanism,
                    neighbours,
                    "it covers plain Gaussian releases only",
                ));
            }
            (Method::Rdp, Gaussian) => Measure::Rdp(RdpCurve::gaussian(s)?),
            (Method::Rdp, PoissonGaussian { sampling_rate }) => {
                if neighbours != Neighbours::AddRemove {
                    return Err(self.unsupported(
                        mechanism,
                        neighbours,
                        "its Poisson bound (Mironov, Talwar, Zhang 2019) is for add-remove",
                    ));
                }
                Measure::Rdp(RdpCurve::poisson_gaussian(s, sampling_rate)?)
            }
            (Method::Rdp, BatchGaussian { batch, population }) => match neighbours {
                Neighbours::Substitute => {
                    Measure::Rdp(RdpCurve::batch_gaussian(s, batch, population)?)
                }
                // The PLD's dominating pair for this case is the Poisson add/remove pair with
                // rate b/n and multiplier s/2; its Rényi divergences are Mironov et al.'s.
                Neighbours::AddRemove => Measure::Rdp(RdpCurve::poisson_gaussian(
                    0.5 * s,
                    batch as f64 / population as f64,
                )?),
            },
            (Method::Pld, Gaussian) => pld_measure(pld::Mechanism::Gaussian {
                noise_multiplier: s,
            })?,
            (Method::Pld, PoissonGaussian { sampling_rate }) => {
                pld_measure(pld::Mechanism::PoissonGaussian {
                    noise_multiplier: s,
                    sampling_rate,
                })?
            }
            (Method::Rdp, DpBarker { batch, population }) => match neighbours {
                Neighbours::Substitute => Measure::Rdp(RdpCurve::dp_barker(batch, population)?),
                Neighbours::AddRemove => {
                    return Err(self.unsupported(
                        mechanism,
                        neighbours,
                        "its bound (Räisä 2020, Thm 3.3) is for substitute neighbours",
                    ));
                }
            },
            (Method::Pld, DpBarker { .. }) => {
                return Err(self.unsupported(
                    mechanism,
                    neighbours,
                    "no privacy-loss distribution is known for it (Räisä 2020, Sec. 3.4)",
                ));
            }
            (Method::Pld, BatchGaussian { batch, population }) => {
                pld_measure(pld::Mechanism::BatchGaussian {
                    noise_multiplier: s,
                    batch,
                    population,
                })?
            }
        })
    }

    /// The measure of no release.
    fn identity(self, neighbours: Neighbours) -> Result<Measure, CompositionError> {
        Ok(match self {
            Method::Analytic => Measure::Gaussian(GaussianComposition::from_mu(0.0)?),
            Method::Zcdp => Measure::Zcdp { rho: 0.0 },
            Method::Rdp => Measure::Rdp(RdpCurve::compose(&[])?),
            Method::Pld => Measure::Pld(PldPair::from_releases(
                &[],
                neighbours,
                PldConfig::default(),
            )?),
        })
    }

    /// The measure of a composition, release group by release group in order (so that a
    /// prefix extended by [`Measure::compose`] gives the same numbers as the whole).
    pub fn measure(self, composition: &Composition) -> Result<Measure, CompositionError> {
        let n = composition.neighbours;
        composition
            .releases
            .iter()
            .try_fold(self.identity(n)?, |total, r| {
                total.compose(
                    &self.release_measure(r.mechanism, r.noise_multiplier, n)?,
                    r.count,
                )
            })
    }

    pub(super) fn max_releases(
        self,
        prefix: &Composition,
        release: Release,
        epsilon: f64,
        delta: f64,
    ) -> Result<Estimate<MaxReleases>, CompositionError> {
        let s = release.noise_multiplier;
        let one = self.release_measure(release.mechanism, s, prefix.neighbours)?;
        let start = self.measure(prefix)?;
        let delta_after = |k: u64| start.compose(&one, k as f64)?.delta(epsilon);
        let k = match self.gaussian() {
            // The existing real-valued search (Räisä 2020, Alg. 2), same arithmetic.
            Some(a)
                if prefix.releases.is_empty() && release.mechanism == MechanismKind::Gaussian =>
            {
                super::max_releases(a, s, epsilon, delta)?
            }
            _ => {
                if delta_after(0)? > delta {
                    return Err(CompositionError::PrefixExceedsBudget);
                }
                last_fitting(MAX_EXACT_COUNT as u64, |k| {
                    Ok::<_, CompositionError>(delta_after(k)? <= delta)
                })?
                .ok_or(AccountantError::TooManyReleases)?
            }
        };
        let total = prefix.then(Release {
            count: k as f64,
            ..release
        })?;
        Ok(Estimate {
            method: self,
            value: MaxReleases {
                releases: k,
                delta_at_releases: delta_after(k)?,
                delta_at_next: delta_after(k + 1)?,
            },
            error: self.stated_error(&total),
        })
    }

    pub(super) fn calibrate(
        self,
        prefix: &Composition,
        mechanism: MechanismKind,
        releases: u64,
        (epsilon, delta): (f64, f64),
        cancel: &Cancel,
    ) -> Result<Estimate<f64>, CompositionError> {
        let n = prefix.neighbours;
        let k = releases as f64;
        let s = match self.gaussian() {
            // To the last bit by μ arithmetic.
            Some(a) if prefix.releases.is_empty() && mechanism == MechanismKind::Gaussian => {
                super::calibrate(a, releases, epsilon, delta)?
            }
            _ => {
                // Refuse an uncovered mechanism before any work on the prefix.
                self.release_measure(mechanism, 1.0, n)?;
                let start = self.measure(prefix)?;
                if start.delta(epsilon)? > delta {
                    return Err(CompositionError::PrefixExceedsBudget);
                }
                // Whether δ(ε) with multiplier s is within δ, and ln of their ratio, which is
                // continuous and decreasing in s, to guide the search.
                let probe = |s: f64| {
                    if cancel.is_cancelled() {
                        return Err(CompositionError::Cancelled);
                    }
                    let one = self.release_measure(mechanism, s, n)?;
                    let at = start.compose(&one, k)?.delta(epsilon)?;
                    Ok::<_, CompositionError>((at <= delta, at.ln() - delta.ln()))
                };
                first_fitting(1.0, NOISE_SPAN, self.noise_tolerance(), probe)?.ok_or(
                    CompositionError::NoiseOutOfRange(1.0 / NOISE_SPAN, NOISE_SPAN),
                )?
            }
        };
        let total = prefix.then(Release {
            mechanism,
            noise_multiplier: s,
            count: k,
        })?;
        Ok(Estimate {
            method: self,
            value: s,
            error: self.stated_error(&total),
        })
    }
}

/// The calibration search covers multipliers in [1/span, span].
const NOISE_SPAN: f64 = 1e9;

impl Method {
    /// Relative width to which a calibration narrows the multiplier: s fits, s/(1 + tol) not.
    /// 1e-9 for the curves in closed form; 1e-6 for the numerical PLD, whose δ moves by
    /// discretisation steps: past a relative 1e-7 in s it was no longer monotone, and the
    /// 11 of 26 probes spent beyond 1e-6 took a subsampled plan of 10⁶ releases at ε = 100
    /// from 4.5 s to 7.2 s.
    fn noise_tolerance(self) -> f64 {
        match self {
            Method::Pld => 1e-6,
            Method::Analytic | Method::Zcdp | Method::Rdp => 1e-9,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// One accountant's answer and the error it states for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate<T> {
    pub method: Method,
    pub value: T,
    pub error: StatedError,
}

/// An accountant that covers the releases but could not answer (say, a PLD too large).
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub method: Method,
    pub error: CompositionError,
}

/// The chosen estimate and every covering accountant's outcome (just the one for
/// [`Choice::Only`](super::Choice::Only)).
#[derive(Clone, Debug, PartialEq)]
pub struct Answer<T> {
    pub estimate: Estimate<T>,
    pub candidates: Vec<Result<Estimate<T>, Failure>>,
}

/// The most releases k that fit, with δ(k) ≤ target < δ(k + 1) as the accountant computes δ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MaxReleases {
    pub releases: u64,
    pub delta_at_releases: f64,
    pub delta_at_next: f64,
}
