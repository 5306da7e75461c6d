//! Choosing the accountant that answers ([`Choice`]: one method, or the tightest of those
//! that cover a composition) and the solvers over it: ε at δ, δ at ε, the most releases that
//! fit and the least noise that fits, each answer with every covering accountant's outcome.
use std::fmt;
use std::str::FromStr;

use super::cancel::Cancel;
use super::composition::{
    Answer, Composition, CompositionError, Estimate, Failure, MaxReleases, Method,
};
use super::measure::Measure;
use super::release::{MechanismKind, Release};
use super::{AccountantError, check_delta, check_epsilon};

/// Which accountant answers: one method, or the tightest of those that cover the releases
/// (for plain Gaussian releases the analytic one, which is exact).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Choice {
    Only(Method),
    #[default]
    Best,
}

impl Choice {
    pub fn key(self) -> &'static str {
        match self {
            Choice::Only(m) => m.key(),
            Choice::Best => "best",
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

impl FromStr for Choice {
    type Err = CompositionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "best" {
            return Ok(Choice::Best);
        }
        Method::ALL
            .into_iter()
            .find(|m| m.key() == s)
            .map(Choice::Only)
            .ok_or_else(|| CompositionError::UnknownAccountant(s.to_owned()))
    }
}

impl Choice {
    /// The smallest value of `read` over the composition's measures (ε at δ, or δ at ε).
    fn smallest(
        self,
        composition: &Composition,
        read: impl Fn(&Measure) -> Result<f64, CompositionError>,
    ) -> Result<Answer<f64>, CompositionError> {
        self.answer(
            composition.gaussian().is_some(),
            |m| {
                Ok(Estimate {
                    method: m,
                    value: read(&m.measure(composition)?)?,
                    error: m.stated_error(composition),
                })
            },
            |a, b| a < b,
        )
    }

    /// Runs `solve` for the chosen method, or for each covering one and keeps the estimate
    /// for which `better` holds against all others (the first on ties).
    ///
    /// For plain Gaussian releases `best` runs the analytic accountant alone: it is the exact
    /// curve that the others only bound (a PLD calibration would bisect for seconds to lose).
    fn answer<T: Clone>(
        self,
        plain_gaussian: bool,
        solve: impl Fn(Method) -> Result<Estimate<T>, CompositionError>,
        better: impl Fn(&T, &T) -> bool,
    ) -> Result<Answer<T>, CompositionError> {
        let methods: &[Method] = match self {
            Choice::Only(m) => {
                let estimate = solve(m)?;
                return Ok(Answer {
                    candidates: vec![Ok(estimate.clone())],
                    estimate,
                });
            }
            Choice::Best if plain_gaussian => &[Method::Analytic],
            Choice::Best => &Method::ALL,
        };
        let mut candidates = Vec::new();
        let mut refusal = None;
        for &method in methods {
            match solve(method) {
                Err(e @ CompositionError::Unsupported { .. }) => refusal = Some(e),
                // Stopped: no answer, not the best of the others.
                Err(CompositionError::Cancelled) => return Err(CompositionError::Cancelled),
                outcome => candidates.push(outcome.map_err(|error| Failure { method, error })),
            }
        }
        let best = candidates
            .iter()
            .flatten()
            .fold(None, |best: Option<&Estimate<T>>, e| match best {
                Some(b) if !better(&e.value, &b.value) => Some(b),
                _ => Some(e),
            })
            .cloned();
        if let Some(estimate) = best {
            return Ok(Answer {
                estimate,
                candidates,
            });
        }
        // Every covering method failed (report the first reason), or none covers them.
        Err(candidates
            .into_iter()
            .find_map(Result::err)
            .map(|f| f.error)
            .or(refusal)
            .expect("each method either covers the releases or refuses them"))
    }

    /// The smallest ε with δ(ε) ≤ `delta` for the composition.
    pub fn epsilon(
        self,
        composition: &Composition,
        delta: f64,
    ) -> Result<Answer<f64>, CompositionError> {
        check_delta(delta)?;
        self.smallest(composition, |measure| measure.epsilon(delta))
    }

    /// δ at ε for the composition.
    pub fn delta(
        self,
        composition: &Composition,
        epsilon: f64,
    ) -> Result<Answer<f64>, CompositionError> {
        check_epsilon(epsilon)?;
        self.smallest(composition, |measure| measure.delta(epsilon))
    }

    /// The most releases of `mechanism` with multiplier s that fit (ε, δ) after `prefix`:
    /// δ(k) ≤ δ < δ(k + 1), by doubling and bisection on integer k (Räisä 2020, Alg. 2; the
    /// real-valued original for analytic/zcdp without a prefix). 0 if not even one fits.
    pub fn max_releases(
        self,
        prefix: &Composition,
        mechanism: MechanismKind,
        noise_multiplier: f64,
        epsilon: f64,
        delta: f64,
    ) -> Result<Answer<MaxReleases>, CompositionError> {
        check_epsilon(epsilon)?;
        check_delta(delta)?;
        let release = Release {
            mechanism,
            noise_multiplier,
            count: 1.0,
        };
        release.validate()?;
        self.answer(
            prefix.gaussian().is_some() && mechanism == MechanismKind::Gaussian,
            |m| m.max_releases(prefix, release, epsilon, delta),
            |a, b| a.releases > b.releases,
        )
    }

    /// The smallest noise multiplier with which `releases` releases of `mechanism` fit (ε, δ)
    /// after `prefix`: to the last bit for analytic/zcdp without a prefix, otherwise by
    /// a search in ln s to a relative 1e-9, 1e-6 for the PLD (s fits and s/(1 + tol) does
    /// not: [`Method::noise_tolerance`]). A
    /// `cancel` set meanwhile ends the search at its next probe.
    pub fn calibrate(
        self,
        prefix: &Composition,
        mechanism: MechanismKind,
        releases: u64,
        (epsilon, delta): (f64, f64),
        cancel: &Cancel,
    ) -> Result<Answer<f64>, CompositionError> {
        check_epsilon(epsilon)?;
        check_delta(delta)?;
        if releases == 0 {
            return Err(AccountantError::ZeroReleases.into());
        }
        mechanism.validate()?;
        // Any multiplier would "fit" a mechanism that ignores it.
        if matches!(mechanism, MechanismKind::DpBarker { .. }) {
            return Err(CompositionError::FixedNoise);
        }
        self.answer(
            prefix.gaussian().is_some() && mechanism == MechanismKind::Gaussian,
            |m| m.calibrate(prefix, mechanism, releases, (epsilon, delta), cancel),
            |a, b| a < b,
        )
    }
}
