//! Where each release of the `summaries` route is centred, as a plan the coordinator walks:
//! pilot releases find a centre near the posterior mode, then the final releases at that
//! centre are averaged into the one summary the noise-aware posterior conditions on. The
//! number of releases is fixed when the run is opened; how they split is post-processing.
//!
//! - The first pilot is centred at the prior's mode with a Chebyshev window h: PASS-GLM's
//!   degree-2 approximation (Huggins et al. 2017) of each row's log-likelihood over
//!   predictors within h of the row's predictor there (h = 2 by default). Its polynomial is
//!   biased away from the window's centre, so it only gives a rough θ₁. A row whose
//!   predictor lies outside its window is summarised by the same polynomial, less well.
//! - Each further pilot is the gradient and negative Hessian at the current centre (window
//!   0, exact local curvature), and the next centre is the mode of its noise-aware Gaussian
//!   approximation ([`Approximation`]): a private Newton step that shrinks towards the
//!   prior as far as the release's noise drowns its curvature. No step moves the linear
//!   predictor by more than [`TRUST_RADIUS`], measured over the covariates' box
//!   coefficient by coefficient (√Σ(mₐΔₐ)², mₐ = max |x̃ₐ|), so a noisy or far-off quadratic
//!   cannot throw the centre away. Piloting stops once a step is shorter than [`SETTLED`]
//!   posterior sds, or when one release is left.
//! - The finals' centre is the last pilot's target, except when piloting ran out of
//!   releases without settling (the budget's noise, not the climb, keeps the steps long):
//!   then it is the average of the last [`FINAL_CENTRE_TARGETS`] pilots' targets. Each
//!   target is the previous centre plus a noisy Newton step, so once the pilots only scatter
//!   about the mode the targets' errors are mostly their releases' independent noises, and
//!   their average is up to √k times closer to the mode. The final quadratic is fitted about this
//!   centre, so its error grows with the centre's distance from the mode. On logistic GLMs
//!   with θ drawn from N(0, 1) at ε ≤ 1 (d = 5, 20 000 rows; 7 pilots of 8 releases; the
//!   calibration example's seeds) the last target alone left 90 % intervals covering
//!   0.856 (ε = 0.5) and 0.860 (ε = 1) over 200 repetitions, the average of three 0.880
//!   and 0.866 (the exact posterior on the same rows 0.901): better, still short. Averaging
//!   five reached back into the climb (0.876 against 0.896 at ε = 1, 100 repetitions). At
//!   d = 6 with 100 000 rows it changed nothing measurable (0.857 and 0.875 against 0.862
//!   and 0.868; exact 0.883): there the centre is not what limits coverage.
//! - The final releases, all at that centre, are averaged: m releases at one noise
//!   multiplier s compose exactly like one at s/√m (Gaussian privacy losses add), so the
//!   average has the noise of one release with m of the run's shares. They are Taylor's
//!   (window 0): the noise-aware posteriors read the exact local sums and follow the
//!   exponential (`tilted.rs`) and the sigmoid (`sigmoid.rs`) beyond the centre themselves.
//!   (While the logistic mean was a straight line its finals were fitted over 2 sds of the
//!   linear predictor, up to 4; at d = 5, 20 000 rows, 800 repetitions, ε 0.5 and 1 that
//!   covered 85.9 and 88.3 %, window 0 with the sigmoid's bend 92.6 and 92.4 %, in
//!   intervals 0.55 and 0.63 times as wide; docs/design.md §3.)
//! - The Taylor pilots' releases are pooled with the finals ([`Rounds::finish`]), except
//!   for the poisson family, whose exponential a quadratic does not move: each moved to the
//!   finals' centre and weighted by its noise plus how far its released curvature is from
//!   the finals'. Where noise keeps the pilots' steps long they rarely settle (a step that
//!   is noise alone is about √d posterior sds), and at d = 6 a run pilots seven of its
//!   eight releases, each scattered about the mode and each carrying its own share of the
//!   information the plain average of the finals leaves out.
//!
//! The mean summaries of the Gaussian-likelihood models are one release, needing no centre.
//! The gaussian GLM's quadratic is exact at any centre, so it pilots only to learn θ's
//! spread for the curvature weight below: [`EXACT_RELEASES`], pooled about their centres'
//! average ([`Rounds::pooled`]). Everything here is post-processing of releases.
//!
//! Each release after a pilot weights its curvature block by κ ([`curvature_weight`]): one
//! Gaussian release of (g, κA) spends the same budget on a finer Â and a coarser ĝ, as far
//! as θ's spread about the centre, by the pilot's approximation, makes Â's error count. The
//! poisson GLM's releases take κ ≈ 3–4; the logistic pilots end near the mode, where κ
//! is 1; an exact summary's take [`EXACT_CURVATURE_EMPHASIS`] times that weight, and the
//! logistic one's [`hidden_emphasis`] times it, as far as the pilots' curvature shows a
//! direction the finals' noise would hide (`weight.rs`). The first release is unweighted:
//! the gaussian GLM's single release, weighted by the prior's spread, gave intervals
//! calibrated and narrower when θ was drawn from the prior, and errors twice as large under
//! a vague prior (docs/design.md §3).
//!
//! [`EXACT_CURVATURE_EMPHASIS`]: super::weight::EXACT_CURVATURE_EMPHASIS
//! [`hidden_emphasis`]: super::weight::hidden_emphasis
//!
//! The defaults were chosen on simulated GLMs: without noise (d = 5, 20 000 rows, θ = (0.5,
//! 1, −0.5, 0.25, −0.125)) a first window of 0, 2 or 9 (the reach of ±1 on every
//! coefficient) put the logistic intercept at 0.38, 0.44 and 1.07 after the first pilot, the
//! mode's being 0.52 (9 overshoots, and the Newton steps after it oscillate); with h = 2 two
//! pilots leave the final quadratic's mode within 0.1 posterior sd of the exact one for
//! both the logistic and the poisson family. With θ drawn from N(0, 1) (d = 6, 100 000 rows,
//! almost no noise), a trust radius of 4 at the box's corner, max |x̃ᵀΔ|, held the pilots
//! short of the mode and the 90 % intervals covered 87 % (z-scores' rms 1.39); measured
//! coefficient by coefficient, 89 % (rms 1.02). Plain Newton pilots followed ĝ's noise: on
//! the poisson GLM with 2 000 rows at ε = 10 they covered 77 %, the noise-aware steps 87 %.

use std::sync::Arc;

use super::quadratic::{Approximation, Release};
use super::weight::{PilotCurvature, curvature_weight, emphasis};
use crate::models::summaries::{Reading, join_summary, quadratic, split_summary};
use crate::models::{Model, QuadraticSummaries};

/// How many releases go where.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    /// Releases in all (each party's run).
    pub releases: u32,
    /// Pilot releases at least, each at a new centre. Piloting goes on while the last
    /// Newton step was longer than [`SETTLED`] and more than one release is left; the rest
    /// are the finals.
    pub min_pilots: u32,
    /// The first pilot's Chebyshev window in the linear predictor (0: Taylor).
    pub window: f64,
}

/// Releases when the summary is approximate. More pilots reach the mode of a saturated
/// logistic GLM (θ drawn from N(0, 1), d = 5, 20 000 rows): with 5 releases its Newton
/// pilots were still climbing when the last one stepped back towards the prior along the
/// direction the local curvature no longer measures, and 90 % intervals covered 85 % at
/// ε = 0.5 and 83 % at ε = 1 (z-scores' rms 1.30, 1.35; 100 repetitions); with 8, 89 % both
/// (rms 1.13, 1.10), while with 2 000 rows, where noise dominates, coverage stayed within
/// a point. Stopping the pilots once a step is within √d posterior sds (the noise's own
/// reach) averaged more finals and covered 82 %. With 12 (200 repetitions, the pooled
/// finals and the prior ∝ det A) d = 5 at ε = 1 covered 88.8 % against 86.1 % but with
/// intervals 26 % wider, and d = 6 (100 000 rows) at ε = 0.5 85.8 % against 87.6 %.
pub const DEFAULT_RELEASES: u32 = 8;
/// Releases when the quadratic summary is exact (the gaussian GLM): any centre gives the
/// same summary, but after a pilot the later releases can weight their curvature by what
/// it says of θ's spread ([`curvature_weight`]), and every release is pooled. Measured on
/// the calibration example (θ drawn from N(0, 1); 50 % (90 %) coverage, then the 90 %
/// intervals' width over the exact posterior's, at ε 0.5, 1, 3, 10): one release at d = 3
/// (2 000 rows, 400 repetitions from seed 200 001) 47.0 (87.4) 27.2, 54.0 (92.9) 22.2,
/// 52.1 (91.8) 11.0, 49.9 (89.1) 4.1; three 51.0 (90.4) 29.3, 52.0 (92.1) 19.1, 50.8
/// (90.7) 7.5, 48.2 (90.6) 3.0; four alike (29.4, 18.9, 7.4, 2.85 wide). At d = 5 (20 000 rows, 100 repetitions) three
/// covered 90.2, 90.0, 90.8 and 90.4 % in intervals 19.1, 10.6, 4.2 and 1.8 wide, one
/// release 29.9, 15.8, 5.9 and 2.3 (all at the error-minimising curvature weight, before
/// [`EXACT_CURVATURE_EMPHASIS`](super::weight::EXACT_CURVATURE_EMPHASIS)).
pub const EXACT_RELEASES: u32 = 3;
/// Pilots at least when the summary is approximate: a global one and one Newton step.
pub const DEFAULT_MIN_PILOTS: u32 = 2;
/// A Newton step shorter than this in the released curvature's norm, √(ΔᵀÂΔ) (about that
/// many posterior sds), means the centre is at the mode: piloting stops.
pub const SETTLED: f64 = 1.0;
/// How many of the last pilots' targets the finals' centre averages when piloting ran out of
/// releases without settling (the first, global pilot never counts).
pub const FINAL_CENTRE_TARGETS: usize = 3;
/// The first pilot's Chebyshev window in the linear predictor when none is given.
pub const DEFAULT_WINDOW: f64 = 2.0;
/// The trapezoid rule's error in a pilot's gradient moved to the finals' centre, per entry
/// of g, is taken as Dₖ‖s‖²/TRAPEZOID (`moved`): fitted to the moved gradients' error
/// beyond their noise over the steps with ‖s‖² > 0.5, which was Dₖ‖s‖²/107 at ε 10 and
/// /92 at ε 3 (d = 5, 20 000 rows, 30 data sets each; at ε 1 the noise drowns it).
pub const TRAPEZOID: f64 = 100.0;
/// The most a step of the pilots may move the linear predictor, √Σ(mₐΔₐ)² with mₐ the
/// covariates' bound on coefficient a.
pub const TRUST_RADIUS: f64 = 4.0;

impl Schedule {
    /// The default for `model`: one release for a mean summary; [`EXACT_RELEASES`] with
    /// one Taylor pilot at least for an exact quadratic one; else [`DEFAULT_RELEASES`] with
    /// [`DEFAULT_MIN_PILOTS`] pilots at least, the first with [`DEFAULT_WINDOW`]. `None` if
    /// the model has no summaries.
    pub fn default_for(model: &dyn Model) -> Option<Self> {
        let Reading::Quadratic(q) = model.summaries()?.reading() else {
            return Some(Schedule {
                releases: 1,
                min_pilots: 0,
                window: 0.0,
            });
        };
        if q.exact() {
            return Some(Schedule {
                releases: EXACT_RELEASES,
                min_pilots: 1,
                window: 0.0,
            });
        }
        Some(Schedule {
            releases: DEFAULT_RELEASES,
            min_pilots: DEFAULT_MIN_PILOTS,
            window: DEFAULT_WINDOW,
        })
    }

    /// Releases per party in all.
    pub fn releases(&self) -> u64 {
        u64::from(self.releases)
    }

    pub fn check(&self) -> Result<(), String> {
        if self.releases <= self.min_pilots {
            return Err(format!(
                "the summaries route needs a final release after its {} pilots, not {} releases in all",
                self.min_pilots, self.releases
            ));
        }
        if !(self.window.is_finite() && self.window >= 0.0) {
            return Err(format!(
                "the first release's window must be a finite number ≥ 0, got {}",
                self.window
            ));
        }
        Ok(())
    }
}

/// One pilot: where it was centred and where its Newton step led.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Pilot {
    pub centre: Vec<f64>,
    pub window: f64,
    pub next: Vec<f64>,
}

/// The averaged final releases: what the noise-aware posterior conditions on.
#[derive(Clone, Debug, PartialEq)]
pub struct Final {
    pub centre: Vec<f64>,
    pub value: Vec<f64>,
    /// Noise variance of each entry of `value`: of ĝ (or of the mean summary) …
    pub noise_variance: f64,
    /// … and of Â, whose block `value` holds divided by the curvature weight.
    pub curvature_noise_variance: f64,
    /// How many Taylor pilots were pooled into it.
    pub pooled: usize,
}

impl Final {
    /// The final summary as (g, A), for quadratic summaries.
    pub fn quadratic(&self) -> Release {
        let (g, a) = split_summary(self.centre.len(), &self.value);
        Release {
            centre: self.centre.clone(),
            g,
            a,
            noise_variance: self.noise_variance,
            curvature_noise_variance: self.curvature_noise_variance,
        }
    }
}

/// The walk through a [`Schedule`]: ask [`Rounds::next`], release there, [`Rounds::record`].
pub struct Rounds {
    model: Arc<dyn Model>,
    schedule: Schedule,
    centre: Vec<f64>,
    done: u32,
    /// True until the pilots are over.
    piloting: bool,
    pilots: Vec<Pilot>,
    /// The Taylor pilots' releases (window 0), which the finals may pool.
    taylor: Vec<Release>,
    /// E‖θ − θ_r‖² under the last pilot's approximation (its covariance's trace plus the
    /// centre's distance from its mode); 0 before the first pilot.
    spread: f64,
    /// What the pilots measured of A, for the logistic summary's emphasis
    /// ([`emphasis`]).
    pilot_curvature: PilotCurvature,
    /// The final releases' sum so far and their noise variances (ĝ's, Â's).
    sum: Vec<f64>,
    noise_variance: f64,
    curvature_noise_variance: f64,
}

impl Rounds {
    pub fn new(model: Arc<dyn Model>, schedule: Schedule) -> Self {
        Rounds {
            // Nothing but the prior is known of θ before the first release, and the prior's
            // spread is no measure of θ's distance from its mode (a vague prior's is huge):
            // the first release is unweighted.
            spread: 0.0,
            pilot_curvature: PilotCurvature::default(),
            centre: model.prior_mode(),
            model,
            piloting: schedule.min_pilots > 0,
            schedule,
            done: 0,
            pilots: Vec::new(),
            taylor: Vec::new(),
            sum: Vec::new(),
            noise_variance: 0.0,
            curvature_noise_variance: 0.0,
        }
    }

    /// The centre, window and curvature weight of the next release, or `None` when all
    /// are made.
    pub fn next(&self) -> Option<(&[f64], f64, f64)> {
        if u64::from(self.done) >= self.schedule.releases() {
            return None;
        }
        let first_pilot = self.done == 0 && self.schedule.min_pilots > 0;
        // Every release after the first pilot is Taylor's.
        let window = if first_pilot {
            self.schedule.window
        } else {
            0.0
        };
        Some((&self.centre, window, self.weight(window)))
    }

    /// The next release's curvature weight (1 for mean summaries, which have no curvature).
    fn weight(&self, window: f64) -> f64 {
        quadratic(self.model.as_ref()).map_or(1.0, |q| {
            let emphasis = emphasis(q, &self.pilot_curvature, self.schedule.releases);
            curvature_weight(q.block_bounds(&self.centre, window), self.spread, emphasis)
        })
    }

    /// Takes the federation's summed release for the query [`Rounds::next`] gave, each entry
    /// with noise variance `noise_variance`. A quadratic summary's curvature block is read
    /// back from its weight κ: Â = (κA + e)/κ, whose noise variance is σ²/κ².
    pub fn record(&mut self, value: &[f64], noise_variance: f64) {
        let (_, window, weight) = self.next().expect("a release was due");
        let d = self.model.dim();
        let mut value = value.to_vec();
        for a in &mut value[d..] {
            *a /= weight;
        }
        let curvature_noise_variance = noise_variance / (weight * weight);
        if self.piloting {
            let (g, a) = split_summary(d, &value);
            let release = Release {
                centre: self.centre.clone(),
                g,
                a,
                noise_variance,
                curvature_noise_variance,
            };
            let approximation = Approximation::of(self.model.as_ref(), &release);
            self.pilot_curvature.add(&release);
            if window == 0.0 {
                self.taylor.push(release);
            }
            let next = self.trusted(approximation.mode.clone());
            let settled = window == 0.0 && approximation.step_length(&next) <= SETTLED;
            self.pilots.push(Pilot {
                centre: std::mem::replace(&mut self.centre, next.clone()),
                window,
                next,
            });
            let made = self.done + 1;
            let left = self.schedule.releases - made;
            self.piloting = !(made >= self.schedule.min_pilots && (settled || left <= 1));
            if !self.piloting && !settled {
                self.centre = self.averaged_target();
            }
            if let Some(covariance) = approximation.covariance() {
                let off: f64 = (self.centre.iter().zip(&approximation.mode))
                    .map(|(c, m)| (c - m).powi(2))
                    .sum();
                self.spread = covariance.trace() + off;
            }
        } else {
            if self.sum.is_empty() {
                self.sum = vec![0.0; value.len()];
            }
            for (s, v) in self.sum.iter_mut().zip(value) {
                *s += v;
            }
            self.noise_variance += noise_variance;
            self.curvature_noise_variance += curvature_noise_variance;
        }
        self.done += 1;
    }

    /// The average of the last [`FINAL_CENTRE_TARGETS`] pilots' targets after the first
    /// pilot (the last target alone when there is no other).
    fn averaged_target(&self) -> Vec<f64> {
        let k = FINAL_CENTRE_TARGETS.min(self.pilots.len() - 1).max(1);
        let last = &self.pilots[self.pilots.len() - k..];
        (0..self.model.dim())
            .map(|i| last.iter().map(|p| p.next[i]).sum::<f64>() / k as f64)
            .collect()
    }

    /// `next`, pulled back towards the centre so that the step's reach √Σ(mₐΔₐ)² is at most
    /// [`TRUST_RADIUS`].
    fn trusted(&self, next: Vec<f64>) -> Vec<f64> {
        let radius = TRUST_RADIUS;
        let delta: Vec<f64> = next.iter().zip(&self.centre).map(|(n, c)| n - c).collect();
        let reach = self
            .reach_weights()
            .iter()
            .zip(&delta)
            .map(|(m, d)| (m * d).powi(2))
            .sum::<f64>()
            .sqrt();
        if reach.is_nan() || reach <= radius {
            return next;
        }
        let shrink = radius / reach;
        self.centre
            .iter()
            .zip(&delta)
            .map(|(c, d)| c + shrink * d)
            .collect()
    }

    /// The quadratic summaries the pilots read (only a model with them has pilots).
    fn quadratic(&self) -> &dyn QuadraticSummaries {
        quadratic(self.model.as_ref()).expect("pilots read quadratic summaries")
    }

    /// max |x̃ₐ| over the covariates' box, by coefficient.
    fn reach_weights(&self) -> Vec<f64> {
        let summaries = self.quadratic();
        (0..self.model.dim())
            .map(|a| {
                let mut e = vec![0.0; self.model.dim()];
                e[a] = 1.0;
                summaries.reach(&e)
            })
            .collect()
    }

    /// The pilots made so far.
    pub fn pilots(&self) -> &[Pilot] {
        &self.pilots
    }

    /// The averaged final summary, once every release is recorded, pooled with the Taylor
    /// pilots (never for the poisson family, whose exponential a quadratic does not move).
    pub fn finish(&self) -> Option<Final> {
        if self.next().is_some() {
            return None;
        }
        let m = f64::from(self.schedule.releases) - self.pilots.len() as f64;
        let averaged = Final {
            centre: self.centre.clone(),
            value: self.sum.iter().map(|s| s / m).collect(),
            // The average of m releases with variances vₖ has variance Σvₖ/m².
            noise_variance: self.noise_variance / (m * m),
            curvature_noise_variance: self.curvature_noise_variance / (m * m),
            pooled: 0,
        };
        let pool = !self.taylor.is_empty() && !self.quadratic().tilted();
        Some(if pool {
            self.pooled(averaged)
        } else {
            averaged
        })
    }

    /// The finals pooled with every Taylor pilot. A pilot's summary at cₖ, moved to the
    /// finals' centre c, is the gradient ĝₖ − ½(Âₖ + Â)(c − cₖ) (the trapezoid rule, exact
    /// where the curvature changes linearly between the two) with the curvature Âₖ: an
    /// estimate of the finals' (g, A). Its curvature's error is its noise (variance uₖ per
    /// entry) plus the curvature's change between the centres, estimated as post-processing
    /// from the released curvatures themselves: the mean over A's entries of (Âₖ − Â)², less
    /// the two noises it contains (uₖ + u), is an unbiased estimate of the squared change Dₖ.
    /// Its gradient's error is its noise vₖ plus what the move adds ([`moved`]). Each block
    /// is the precision-weighted average of the moved pilots' and the finals' (weights 1/v
    /// and 1/u), so its error variance is 1/Σ its weights: pilots whose curvature differs
    /// count little in A, pilots far from the centre little in g.
    /// On the logistic GLM at d = 6, 100 000 rows, with g then weighted as A, 1/(vₖ + Dₖ),
    /// the 90 % intervals covered 87.7 and 91.5 % at ε = 0.5 and 1 (the plain average 83.5
    /// and 86.8 %; exact 90.0 %; 200 repetitions) and narrowed from 5.2 to 3.3 times the
    /// exact posterior's width at ε = 0.5 (docs/design.md §3 has the other rows). Measured
    /// and not kept: g's weight 1/(vₖ + (¼(uₖ + u) + Dₖ)‖c − cₖ‖²), the change as a slope
    /// times the step: the logistic d = 3 rows (2 000 rows, 200 repetitions) covered 95.0
    /// and 92.8 % at ε 0.5 and 1 against 94.8 and 92.2 %.
    ///
    /// An exact summary (the gaussian GLM) is pooled without moving: every release at any
    /// centre cₖ is ĝₖ = A(θ − cₖ) + ξ + eₖ with the same A and the same data term ξ, so the
    /// average of the ĝₖ weighted by 1/vₖ is one exact summary about the centres' average
    /// under the same weights, A(θ − c̄) + ξ + ē, with error variance 1/Σ 1/vₖ. Moving a
    /// pilot with Â would add Â's noise times the step to its g: pooled that way, 2
    /// releases at d = 5 (20 000 rows, ε = 1 and 3) covered 83 and 81 % (100 repetitions).
    fn pooled(&self, averaged: Final) -> Final {
        let d = self.model.dim();
        let fin = averaged.quadratic();
        let exact = self.quadratic().exact();
        // Σ weights of g's block and of A's.
        let mut total = [
            1.0 / averaged.noise_variance,
            1.0 / averaged.curvature_noise_variance,
        ];
        let block = |i: usize| usize::from(i >= d);
        let mut value: Vec<f64> = (averaged.value.iter().enumerate())
            .map(|(i, v)| total[block(i)] * v)
            .collect();
        // Σ g's weight × the centre each pooled g is stated at.
        let mut centre: Vec<f64> = fin.centre.iter().map(|c| total[0] * c).collect();
        for pilot in &self.taylor {
            let (summary, at, weight) = if exact {
                let weight = [
                    1.0 / pilot.noise_variance,
                    1.0 / pilot.curvature_noise_variance,
                ];
                (join_summary(&pilot.g, &pilot.a), &pilot.centre, weight)
            } else {
                let (moved, weight) = moved(pilot, &fin, &averaged.value[d..]);
                (moved, &fin.centre, weight)
            };
            for (i, (v, m)) in value.iter_mut().zip(summary).enumerate() {
                *v += weight[block(i)] * m;
            }
            for (c, a) in centre.iter_mut().zip(at) {
                *c += weight[0] * a;
            }
            total[0] += weight[0];
            total[1] += weight[1];
        }
        Final {
            centre: centre.iter().map(|c| c / total[0]).collect(),
            value: (value.iter().enumerate())
                .map(|(i, v)| v / total[block(i)])
                .collect(),
            noise_variance: 1.0 / total[0],
            curvature_noise_variance: 1.0 / total[1],
            pooled: self.taylor.len(),
        }
    }
}

/// A pilot's summary moved to the finals' centre (the trapezoid rule of
/// [`Rounds::pooled`]), with its weights in g's block and A's. `finals_a` is the finals'
/// released curvature entries (the summary vector's tail).
///
/// A's block: Âₖ estimates the finals' A with its noise uₖ plus the curvature's change
/// between the centres, whose mean square over A's entries, Dₖ, is estimated from the two
/// released curvatures. g's block: the step s = c − cₖ moves ĝₖ by ½(Âₖ + Â)s, which
/// carries the two curvatures' noise times half the step, ¼(uₖ + u)‖s‖² per entry, and the
/// trapezoid rule's own error, the curvature's departure from a straight line along the
/// step (Qs/6 where A changes by Δ₁t + Qt²), taken as Dₖ‖s‖²/[`TRAPEZOID`]. Dₖ itself, the
/// change of A, is not an error of the moved g. Measured on the calibration example
/// (d = 5, 20 000 rows, 30 data sets from seed 600 001 at each of ε 1, 3 and 10; a scratch
/// build printed each moved gradient against the rows' own g at the finals' centre): for
/// steps with ‖s‖² < 0.5 the moved g's mean square error was 0.95–1.10 times
/// vₖ + ¼(uₖ + u)‖s‖², which vₖ + Dₖ, g's former weight, overstated 1.4–170 times; the
/// 16–20 steps a cell beyond ‖s‖² = 0.5 erred by 1.3, 2.0 and 8.3 times those noise terms.
/// Under the former weight the pooled ĝ's stated noise variance exceeded its error's, and
/// the 90 % intervals erred wide (docs/design.md §3).
fn moved(pilot: &Release, fin: &Release, finals_a: &[f64]) -> (Vec<f64>, [f64; 2]) {
    let d = pilot.dim();
    let step: Vec<f64> = (0..d).map(|i| fin.centre[i] - pilot.centre[i]).collect();
    let g: Vec<f64> = (0..d)
        .map(|i| {
            let moved: f64 = (0..d)
                .map(|j| 0.5 * (pilot.a[i][j] + fin.a[i][j]) * step[j])
                .sum();
            pilot.g[i] - moved
        })
        .collect();
    let moved = join_summary(&g, &pilot.a);
    // A's entries are the released vector's tail, after g.
    let curvatures = moved[d..].iter().zip(finals_a);
    let squares: f64 = curvatures.clone().map(|(p, f)| (p - f).powi(2)).sum();
    let mean_square = squares / curvatures.len() as f64;
    let noises = pilot.curvature_noise_variance + fin.curvature_noise_variance;
    let change = (mean_square - noises).max(0.0);
    let step_squared: f64 = step.iter().map(|s| s * s).sum();
    let moving = (0.25 * noises + change / TRAPEZOID) * step_squared;
    let weight = [
        1.0 / (pilot.noise_variance + moving),
        1.0 / (pilot.curvature_noise_variance + change),
    ];
    (moved, weight)
}

#[cfg(test)]
mod tests;
