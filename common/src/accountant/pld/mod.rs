//! A numerical privacy-loss-distribution (PLD) accountant with pessimistic discretisation, in
//! the manner of Google's `dp_accounting.pld` (Koskela, Jälkö & Honkela 2020 "Computing tight
//! differential privacy guarantees using FFT"; Doroshenko et al. 2022 "Connect the Dots").
//!
//! A [`Pld`] is the distribution of the privacy loss L = ln P(o)/Q(o), o ~ P, of one direction
//! of a dominating pair (P, Q): a PMF on the grid {(offset + i)·Δ} plus an atom at +∞ whose
//! mass counts fully towards δ. δ(ε) = p(∞) + Σ_{l>ε} p(l)(1 − e^{ε−l}) (hockey stick).
//! Composition is convolution (FFT). A [`PldPair`] holds the remove and add directions of a
//! mechanism whose PLD is not symmetric (Poisson subsampling under add/remove) and reports
//! the worse of the two, as dp_accounting does.
//!
//! # Grid
//! Discretisation moves each loss by less than one step Δ, biasing ε by about 0.09·(Δ/σ)²
//! relative for a release whose loss has standard deviation σ, at any number of releases
//! (`grid`). A fixed Δ = 1e-4 was 2.2 % loose for the Poisson-subsampled Gaussian at
//! q = 0.001, s = 5 (σ = 2e-4), so each mechanism gets the configured step halved until
//! σ spans 16 steps (0.04 %); wide losses keep 1e-4. PLDs of different steps compose on the
//! finer grid, the coarser PMF moved onto it exactly.
//!
//! # Pessimism (ε is never under-reported)
//! Every approximation only moves probability towards larger losses or into the +∞ atom,
//! or replaces a PLD by one that dominates it in hockey-stick divergence at every ε ∈ ℝ:
//! - a mechanism is discretised by Connect-the-Dots (ibid. Alg. 1): δ is exact at the grid
//!   points, larger in between, and the mass above the top grid point (the noise tail beyond
//!   e^{`log_mass_truncation_bound`}) goes to +∞; dominance is kept by composition;
//! - a composition cuts at most `tail_mass_truncation`/2 from each tail: the low tail is added
//!   to the lowest kept loss, the high tail to +∞ (dp_accounting's `_truncate_tails`); an FFT
//!   power folds what lies outside its Chernoff window back into the window (only ever adding
//!   mass) and adds the high tail's bound to +∞;
//! - FFT round-off leaves tiny negative masses, which are set to 0 (adds mass).
//!
//! # Error bound
//! Let ε(δ) be the exact value for k releases, Δ the configured discretisation interval (each
//! release's own step is at most Δ, which is all the proof needs), b the log mass
//! truncation bound and τ the tail mass truncation, η = k·e^b + τ·(number of compositions).
//! Then, up to floating point (δ to ~1e-12 relative), for any η′ > 0 ([`PldConfig::error_bound`]):
//!
//!   ε(δ) ≤ ε_PLD(δ) ≤ ε(δ − η − η′) + t,  t = min(kΔ, k·cΔ² + Δ·√(2k·ln(1/η′))),
//!
//! with c = (e^Δ − 1 − Δ)/Δ² ≈ ½ (the kΔ branch needs no η′). Proof: Connect-the-Dots splits
//! the mass of each loss l in a grid interval between the interval's two end points so that
//! both its P- and its Q-mass are kept (Doroshenko et al. 2022), so one release's discrete
//! loss is L̂ = L − Z with |Z| ≤ Δ and E[e^Z | L] = 1; hence −cΔ² ≤ E[Z] ≤ 0 (Jensen, and
//! e^z ≤ 1 + z + cz² on |z| ≤ Δ). For k releases L̂ = L − S, S = ΣZⱼ a sum of independent
//! terms, and on {S ≥ −t}, (1 − e^{ε−L̂})₊ ≤ (1 − e^{ε−t−L})₊, so
//! δ_PLD(ε) ≤ δ(ε − t) + P(S < −t) ≤ δ(ε − t) + exp(−(t − kcΔ²)²/(2kΔ²)) (Hoeffding), which
//! is η′ at the t above. The kΔ branch is |S| ≤ kΔ. For k = 10 000 and the defaults this is
//! t = 0.083 instead of kΔ = 1. Observed errors are far smaller still: tests/pld.rs sees
//! ε(δ) ≤ ε_PLD(δ) ≤ ε(δ)·(1 + 2e-6) + 1e-7 against the analytic Gaussian composition for
//! s ∈ [0.8, 20], 1 … 5 000 releases, δ ∈ [1e-8, 1e-3] (largest seen: 1.2e-6 relative, at
//! s = 20, 5 000 releases, δ = 1e-8, where rounding in δ amplified by the composition moves
//! it by a few 1e-7); agreement with dp-accounting 0.6.0 to 1.5e-6 relative on its own grid;
//! and for narrow losses (refined grids) at most 0.04 % above dp-accounting on a grid 10
//! times finer and above our own grid of 1e-6, 0.08 % above the exact Gaussian composition
//! at s = 5 000 and 10 000.
mod fft;
mod grid;
mod mechanism;

use serde::{Deserialize, Serialize};

use super::{AccountantError, check_delta, check_epsilon, check_noise_multiplier};
use crate::neighbours::Neighbours;
use mechanism::{Direction, Profile, SubsampledGaussian, SymmetrisedSubsample, connect_the_dots};

/// The most grid points a discretised PLD or an FFT may have by default (3·2^20: about 150
/// MB at the peak of a composition). It bounds a calibration's time and memory: every plan of
/// up to 10⁶ subsampled releases at ε ≤ 10 fits (1–2.3 s, 150 MB), while 8·10⁴ releases at
/// ε = 1 800 would need 2^26 points (76 s, 1.3 GB a calibration): such a PLD is refused,
/// and the tightest of the other accountants answers ([`Choice::Best`](super::Choice)).
pub const DEFAULT_MAX_GRID_POINTS: u64 = 3 << 20;

fn default_max_grid_points() -> u64 {
    DEFAULT_MAX_GRID_POINTS
}

/// Invalid input to the PLD accountant.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PldError {
    #[error(transparent)]
    Accountant(#[from] AccountantError),
    #[error("the sampling rate must lie in (0, 1], got {0}")]
    InvalidSamplingRate(f64),
    #[error(
        "the batch must hold between 1 and all {population} rows of the population, got {batch}"
    )]
    InvalidBatch { batch: u64, population: u64 },
    #[error("the value discretisation interval must be a finite number greater than 0, got {0}")]
    InvalidInterval(f64),
    #[error("the log mass truncation bound must be a finite number below 0, got {0}")]
    InvalidLogMassTruncationBound(f64),
    #[error("the tail mass truncation must lie in [0, 1e-3], got {0}")]
    InvalidTailMassTruncation(f64),
    #[error("PLDs with different configurations cannot be composed")]
    IncompatibleConfigs,
    #[error(
        "a PMF needs at least one finite-loss entry, all masses in [0, 1] and total mass at most 1"
    )]
    InvalidPmf,
    #[error(
        "the PLD would need {0} grid points, more than its limit of {1}; use another accountant, or a coarser discretisation interval"
    )]
    TooManyGridPoints(u64, u64),
}

/// Discretisation and truncation settings; the defaults are dp_accounting's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PldConfig {
    /// Largest grid step Δ of the privacy loss (default 1e-4). A mechanism whose loss has a
    /// standard deviation under 16Δ is discretised on Δ/2^j, the coarsest such step with 16
    /// steps per standard deviation (see `grid`): the relative error of ε does not shrink
    /// with the number of releases, so the step must follow the loss's scale.
    pub value_discretization_interval: f64,
    /// ln of the noise mass each tail may lose when a mechanism is discretised (default −50);
    /// what lies beyond goes to the +∞ atom.
    pub log_mass_truncation_bound: f64,
    /// Mass a composition may cut from its two tails together (default 1e-15), moved
    /// pessimistically (low tail onto the lowest kept loss, high tail to +∞).
    pub tail_mass_truncation: f64,
    /// The most grid points a PLD or an FFT may have ([`DEFAULT_MAX_GRID_POINTS`]).
    #[serde(default = "default_max_grid_points")]
    pub max_grid_points: u64,
}

impl Default for PldConfig {
    fn default() -> Self {
        Self {
            value_discretization_interval: 1e-4,
            log_mass_truncation_bound: -50.0,
            tail_mass_truncation: 1e-15,
            max_grid_points: DEFAULT_MAX_GRID_POINTS,
        }
    }
}

/// The guaranteed error of a PLD answer (see "Error bound" in the module notes):
/// ε(δ) ≤ ε_PLD(δ) ≤ ε(δ − `delta_shift`) + `epsilon_additive`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ErrorBound {
    pub epsilon_additive: f64,
    pub delta_shift: f64,
}

/// η′ of the concentration bound: the δ it gives up for a t far below kΔ.
const CONCENTRATION_DELTA: f64 = 1e-15;

impl PldConfig {
    /// The error bound for `releases` releases in `compositions` composition steps.
    pub fn error_bound(&self, releases: f64, compositions: f64) -> ErrorBound {
        let d = self.value_discretization_interval;
        let truncation = releases * self.log_mass_truncation_bound.exp()
            + self.tail_mass_truncation * compositions;
        let worst_case = releases * d;
        let c = (d.exp_m1() - d) / (d * d);
        let concentration =
            releases * c * d * d + d * (2.0 * releases * (1.0 / CONCENTRATION_DELTA).ln()).sqrt();
        if concentration < worst_case {
            ErrorBound {
                epsilon_additive: concentration,
                delta_shift: truncation + CONCENTRATION_DELTA,
            }
        } else {
            ErrorBound {
                epsilon_additive: worst_case,
                delta_shift: truncation,
            }
        }
    }

    pub fn validate(&self) -> Result<(), PldError> {
        let d = self.value_discretization_interval;
        if !(d.is_finite() && d > 0.0) {
            return Err(PldError::InvalidInterval(d));
        }
        let b = self.log_mass_truncation_bound;
        if !(b.is_finite() && b < 0.0) {
            return Err(PldError::InvalidLogMassTruncationBound(b));
        }
        let t = self.tail_mass_truncation;
        if !(0.0..=1e-3).contains(&t) {
            return Err(PldError::InvalidTailMassTruncation(t));
        }
        Ok(())
    }
}

/// A mechanism with L2 sensitivity 1 under the chosen neighbour relation: the noise
/// multiplier is noise std / that sensitivity (for a sum clipped to C: C for add/remove,
/// 2C for substitute).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "mechanism")]
pub enum Mechanism {
    /// N(0, s²) noise on the released value.
    Gaussian { noise_multiplier: f64 },
    /// Each row enters the sum independently with probability `sampling_rate`, then Gaussian
    /// noise. Add/remove: (1−q)N(0,s²) + qN(1,s²) against N(0,s²) in both orders; substitute:
    /// (1−q)N(0,s²) + qN(−½,s²) against (1−q)N(0,s²) + qN(½,s²) (the row moves by the
    /// sensitivity 1), which is symmetric.
    PoissonGaussian {
        noise_multiplier: f64,
        sampling_rate: f64,
    },
    /// A sum over `batch` rows drawn without replacement from `population`, then Gaussian
    /// noise; γ = b/n. Substitute: the symmetrised pair of [`SymmetrisedSubsample`] (Dong,
    /// Roth, Su 2022, Thm 4.2). Add/remove: adding a row to a fixed-size batch displaces
    /// another, so the batch sum moves by up to 2C, twice the add/remove sensitivity; with
    /// the coupling "the added row replaces a uniformly drawn batch member", joint convexity
    /// of the hockey-stick divergence gives the Poisson add/remove pair with q = γ and
    /// multiplier s/2, each order for its own direction (n is the larger data set's size; a
    /// party's own row count covers removing any of its rows, and adding one, b/(n+1) < b/n).
    BatchGaussian {
        noise_multiplier: f64,
        batch: u64,
        population: u64,
    },
}

impl Mechanism {
    /// (s, γ) after validation: the plain Gaussian is γ = 1, a batch has γ = b/n.
    fn parameters(&self) -> Result<(f64, f64), PldError> {
        let (s, q) = match *self {
            Mechanism::Gaussian { noise_multiplier } => (noise_multiplier, 1.0),
            Mechanism::PoissonGaussian {
                noise_multiplier,
                sampling_rate,
            } => (noise_multiplier, sampling_rate),
            Mechanism::BatchGaussian {
                noise_multiplier,
                batch,
                population,
            } => {
                if batch == 0 || batch > population {
                    return Err(PldError::InvalidBatch { batch, population });
                }
                (noise_multiplier, batch as f64 / population as f64)
            }
        };
        check_noise_multiplier(s)?;
        if !(q > 0.0 && q <= 1.0) {
            return Err(PldError::InvalidSamplingRate(q));
        }
        Ok((s, q))
    }
}

/// A discretised privacy-loss distribution of one direction of a dominating pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Pld {
    config: PldConfig,
    /// Grid step Δ: the configured one halved 0 … `grid::MAX_HALVINGS` times.
    interval: f64,
    /// The loss of `probs[i]` is (offset + i)·Δ.
    offset: i64,
    probs: Vec<f64>,
    infinity_mass: f64,
}

impl Pld {
    /// A PLD from its PMF: mass `probs[i]` at loss (offset + i)·Δ and `infinity_mass` at +∞.
    /// The caller vouches that it is (or dominates) the PLD of a pair of distributions.
    pub fn from_pmf(
        config: PldConfig,
        offset: i64,
        probs: Vec<f64>,
        infinity_mass: f64,
    ) -> Result<Self, PldError> {
        config.validate()?;
        let total: f64 = probs.iter().sum::<f64>() + infinity_mass;
        let in_unit = |p: &f64| (0.0..=1.0).contains(p);
        if probs.is_empty()
            || !probs.iter().all(in_unit)
            || !in_unit(&infinity_mass)
            || total > 1.0 + 1e-9
        {
            return Err(PldError::InvalidPmf);
        }
        Ok(Self {
            config,
            interval: config.value_discretization_interval,
            offset,
            probs,
            infinity_mass,
        })
    }

    /// The PLD of no release: loss 0 with probability 1.
    pub fn identity(config: PldConfig) -> Result<Self, PldError> {
        Self::from_pmf(config, 0, vec![1.0], 0.0)
    }

    pub fn config(&self) -> PldConfig {
        self.config
    }

    /// The grid step Δ of this PLD (at most the configured one).
    pub fn interval(&self) -> f64 {
        self.interval
    }

    /// The grid index of the first entry of [`Pld::probs`].
    pub fn offset(&self) -> i64 {
        self.offset
    }

    pub fn probs(&self) -> &[f64] {
        &self.probs
    }

    pub fn infinity_mass(&self) -> f64 {
        self.infinity_mass
    }

    fn loss(&self, i: usize) -> f64 {
        (self.offset + i as i64) as f64 * self.interval
    }

    /// Connect-the-Dots discretisation of a dominating pair from its profile, on the losses
    /// its noise keeps under the log mass truncation bound, on the configured grid step
    /// halved until one standard deviation of the loss spans 16 steps. The spread is read
    /// from the discretised PMF itself, which overstates a spread far below the step (each
    /// loss is split between two grid points), hence the loop.
    fn from_profile(curve: &impl Profile, config: PldConfig) -> Result<Self, PldError> {
        let mut halvings = 0;
        loop {
            let interval = config.value_discretization_interval / f64::from(1u32 << halvings);
            let pld = Self::on_grid(curve, config, interval)?;
            let more = grid::halvings_needed(&pld.probs).min(grid::MAX_HALVINGS - halvings);
            if more == 0 {
                return Ok(pld);
            }
            halvings += more;
        }
    }

    /// Connect-the-Dots discretisation on the grid of step `d`.
    fn on_grid(curve: &impl Profile, config: PldConfig, d: f64) -> Result<Self, PldError> {
        let (loss_lo, loss_hi) = curve.loss_range(config.log_mass_truncation_bound);
        let i_lo = (loss_lo / d).floor();
        let i_hi = (loss_hi / d).ceil();
        let n = i_hi - i_lo + 1.0;
        if !n.is_finite() || n > config.max_grid_points as f64 {
            return Err(PldError::TooManyGridPoints(
                n.min(u64::MAX as f64) as u64,
                config.max_grid_points,
            ));
        }
        let offset = i_lo as i64;
        let deltas = (0..n as i64)
            .map(|i| curve.delta((offset + i) as f64 * d))
            .collect();
        let (probs, infinity_mass) = connect_the_dots(d, deltas);
        Ok(Self {
            config,
            interval: d,
            offset,
            probs,
            infinity_mass,
        })
    }

    /// The PLD of this and `other` composed (independent releases): FFT convolution on the
    /// finer of the two grids (the coarser PMF moved onto it exactly: the steps differ by a
    /// power of 2), then each tail cut by at most `tail_mass_truncation`/2, pessimistically.
    pub fn compose(&self, other: &Pld) -> Result<Pld, PldError> {
        if self.config != other.config {
            return Err(PldError::IncompatibleConfigs);
        }
        let interval = self.interval.min(other.interval);
        let factor = |p: &Pld| (p.interval / interval).round() as usize;
        let (fa, fb) = (factor(self), factor(other));
        self.check_size(((self.probs.len() - 1) * fa + (other.probs.len() - 1) * fb + 2) as u64)?;
        let probs = fft::convolve(
            &grid::refine(&self.probs, fa),
            &grid::refine(&other.probs, fb),
        );
        let infinity_mass =
            self.infinity_mass + other.infinity_mass - self.infinity_mass * other.infinity_mass;
        let offset = self.offset * fa as i64 + other.offset * fb as i64;
        Ok(self.truncated(interval, offset, probs, infinity_mass))
    }

    fn check_size(&self, n: u64) -> Result<(), PldError> {
        let limit = self.config.max_grid_points;
        if n > limit {
            Err(PldError::TooManyGridPoints(n, limit))
        } else {
            Ok(())
        }
    }

    /// The PLD of k independent copies: one FFT, its k-th power and one inverse, on a window
    /// that keeps all but `tail_mass_truncation` of the mass (Chernoff bound); k = 0 is the
    /// identity.
    pub fn self_compose(&self, k: u64) -> Result<Pld, PldError> {
        if k == 0 {
            return Self::identity(self.config);
        }
        if k == 1 {
            return Ok(self.clone());
        }
        let tail = self.config.tail_mass_truncation;
        let (lo, hi) = fft::chernoff_window(&self.probs, k, tail);
        self.check_size((hi - lo + 1).max(self.probs.len() as u64))?;
        let mut probs = fft::self_convolve_window(&self.probs, k, lo, hi);
        for p in &mut probs {
            *p = p.max(0.0);
        }
        // 1 − (1 − p∞)^k, plus the bound on the high tail folded into the window.
        let infinity_mass = -(k as f64 * (-self.infinity_mass).ln_1p()).exp_m1() + 0.5 * tail;
        Ok(Pld {
            config: self.config,
            interval: self.interval,
            offset: self.offset * k as i64 + lo as i64,
            probs,
            infinity_mass: infinity_mass.min(1.0),
        })
    }

    /// Cuts each tail of a fresh convolution by at most half the tail mass truncation: the
    /// low tail onto the lowest kept loss, the high tail to +∞ (FFT noise set to 0 first).
    fn truncated(
        &self,
        interval: f64,
        offset: i64,
        mut probs: Vec<f64>,
        infinity_mass: f64,
    ) -> Pld {
        for p in &mut probs {
            *p = p.max(0.0);
        }
        let half = 0.5 * self.config.tail_mass_truncation;
        let prefix = |it: &mut dyn Iterator<Item = &f64>| {
            let mut sum = 0.0;
            it.take_while(|&&p| {
                sum += p;
                sum <= half
            })
            .count()
        };
        let left = prefix(&mut probs.iter());
        let right = prefix(&mut probs.iter().rev()).min(probs.len() - left - 1);
        let high: f64 = probs[probs.len() - right..].iter().sum();
        probs.truncate(probs.len() - right);
        let low: f64 = probs[..left].iter().sum();
        probs.drain(..left);
        probs[0] += low;
        Pld {
            config: self.config,
            interval,
            offset: offset + left as i64,
            probs,
            infinity_mass: (infinity_mass + high).min(1.0),
        }
    }

    /// The hockey-stick divergence δ(ε) = p(∞) + Σ_{l>ε} p(l)(1 − e^{ε−l}).
    pub fn delta(&self, epsilon: f64) -> f64 {
        let tail: f64 = self
            .probs
            .iter()
            .enumerate()
            .rev()
            .map(|(i, &p)| (self.loss(i), p))
            .take_while(|&(l, _)| l > epsilon)
            .map(|(l, p)| -p * (epsilon - l).exp_m1())
            .sum();
        (self.infinity_mass + tail).min(1.0)
    }

    /// The smallest ε ≥ 0 with δ(ε) ≤ `delta`, exactly for this PMF (+∞ if the +∞ atom alone
    /// exceeds `delta`). Between grid losses δ(ε) = U − e^ε·W with U = p(∞) + Σ_{l>ε} p(l) and
    /// W = Σ_{l>ε} p(l)e^{−l}, so ε = ln(U − δ) − ln W on the piece where that lands. Scanning
    /// down from the top, W is kept as w·e^{−l}, l the lowest loss taken in so far and
    /// w = Σ p(l′)e^{l−l′} ≤ 1, updated as w ← w·e^{−Δ} + p: no logarithm per entry, and no
    /// underflow where e^{−l} alone would (l > 745).
    pub fn epsilon(&self, delta: f64) -> f64 {
        if self.infinity_mass > delta {
            return f64::INFINITY;
        }
        let step_down = (-self.interval).exp();
        let (mut upper, mut scaled, mut lowest) = (self.infinity_mass, 0.0, self.probs.len());
        for i in (0..self.probs.len()).rev() {
            // ε lands at or above loss(i) when U − δ ≥ W·e^{loss(i)} = w·e^{−Δ}.
            if upper > delta && upper - delta >= scaled * step_down {
                break;
            }
            upper += self.probs[i];
            scaled = scaled * step_down + self.probs[i];
            lowest = i;
        }
        if upper <= delta {
            0.0
        } else {
            ((upper - delta).ln() - scaled.ln() + self.loss(lowest)).max(0.0)
        }
    }
}

/// The PLDs of both directions of a dominating pair: `remove` (the differing row is in the
/// data set of the upper distribution) and `add` (None when the pair is symmetric and it
/// equals `remove`). ε and δ are the worse of the two.
#[derive(Clone, Debug, PartialEq)]
pub struct PldPair {
    remove: Pld,
    add: Option<Pld>,
}

impl PldPair {
    /// The discretised PLD of one release of `mechanism` under `neighbours`.
    pub fn from_mechanism(
        mechanism: &Mechanism,
        neighbours: Neighbours,
        config: PldConfig,
    ) -> Result<Self, PldError> {
        config.validate()?;
        let (s, q) = mechanism.parameters()?;
        let batch = matches!(mechanism, Mechanism::BatchGaussian { .. });
        let curve =
            |s, direction| Pld::from_profile(&SubsampledGaussian::new(s, q, direction), config);
        Ok(match neighbours {
            Neighbours::AddRemove => {
                let s = if batch { 0.5 * s } else { s };
                Self {
                    remove: curve(s, Direction::Remove)?,
                    // Mirror images without sampling: one PLD.
                    add: (q < 1.0).then(|| curve(s, Direction::Add)).transpose()?,
                }
            }
            Neighbours::Substitute => Self {
                remove: if batch {
                    Pld::from_profile(&SymmetrisedSubsample::new(s, q), config)?
                } else {
                    curve(s, Direction::Substitute)?
                },
                add: None,
            },
        })
    }

    /// A heterogeneous composition: `count` releases of each mechanism.
    pub fn from_releases(
        releases: &[(Mechanism, u64)],
        neighbours: Neighbours,
        config: PldConfig,
    ) -> Result<Self, PldError> {
        let mut total = Self {
            remove: Pld::identity(config)?,
            add: None,
        };
        for (mechanism, count) in releases {
            let one = Self::from_mechanism(mechanism, neighbours, config)?;
            total = total.compose(&one.self_compose(*count)?)?;
        }
        Ok(total)
    }

    pub fn remove(&self) -> &Pld {
        &self.remove
    }

    /// The add direction (the remove one when the pair is symmetric).
    pub fn add(&self) -> &Pld {
        self.add.as_ref().unwrap_or(&self.remove)
    }

    /// Both directions composed with `other`'s.
    pub fn compose(&self, other: &PldPair) -> Result<PldPair, PldError> {
        let remove = self.remove.compose(&other.remove)?;
        let add = if self.add.is_none() && other.add.is_none() {
            None
        } else {
            Some(self.add().compose(other.add())?)
        };
        Ok(Self { remove, add })
    }

    /// k copies composed (k = 0: no release).
    pub fn self_compose(&self, k: u64) -> Result<PldPair, PldError> {
        Ok(Self {
            remove: self.remove.self_compose(k)?,
            add: self.add.as_ref().map(|a| a.self_compose(k)).transpose()?,
        })
    }

    /// δ at ε (finite, > 0): the larger of the two directions.
    pub fn delta(&self, epsilon: f64) -> Result<f64, PldError> {
        check_epsilon(epsilon)?;
        Ok(self.remove.delta(epsilon).max(self.add().delta(epsilon)))
    }

    /// The smallest ε ≥ 0 with δ(ε) ≤ `delta` in both directions (δ in (0, 1)).
    pub fn epsilon(&self, delta: f64) -> Result<f64, PldError> {
        check_delta(delta)?;
        Ok(self.remove.epsilon(delta).max(self.add().epsilon(delta)))
    }
}
