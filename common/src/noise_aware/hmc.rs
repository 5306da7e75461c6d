//! Plain HMC with exact gradients, for targets that cost no privacy to evaluate (the
//! noise-aware posteriors): leapfrog trajectories of a jittered length, a Metropolis test on
//! the Hamiltonian, and Stan's warm-up (step size by dual averaging, Hoffman & Gelman 2014,
//! Alg. 5; a diagonal mass from doubling windows of warm-up draws). The chains then run
//! until R̂ ≤ 1.01 and the bulk and tail ESS of every watched coordinate reach 400, as many
//! draws as that takes, up to a cap.
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use super::LogDensity;
use crate::diagnostics::{ess_bulk, ess_tail, rhat};
use crate::proposal::{DualAveraging, VarianceEstimate};

/// The mean acceptance probability warm-up aims for (Stan's default for its samplers).
pub const TARGET_ACCEPT: f64 = 0.8;
/// A trajectory whose energy error exceeds this has diverged and is rejected.
const DIVERGENCE: f64 = 1000.0;
/// Integration time in units of the adapted scales (about a quarter period of a unit normal),
/// jittered by a uniform factor in [0.5, 1.5] so no trajectory length resonates.
const PATH_LENGTH: f64 = 1.5;
/// The longest trajectory, in leapfrog steps.
const MAX_STEPS: usize = 1024;

/// How long to sample, and what convergence means.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    pub warmup: usize,
    /// Draws per chain of the first try; each further try doubles them.
    pub draws: usize,
    /// The most draws per chain before giving up on convergence.
    pub max_draws: usize,
    pub max_rhat: f64,
    pub min_ess: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            warmup: 1000,
            draws: 1000,
            max_draws: 64_000,
            max_rhat: 1.01,
            min_ess: 400.0,
        }
    }
}

/// One transition's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    pub accept_stat: f64,
    pub accepted: bool,
    /// The trajectory left the support or its energy error passed [`DIVERGENCE`]: a
    /// region whose curvature the step size cannot follow, which the chain then fails to
    /// explore (Betancourt 2017, Sec. 6.2).
    pub divergent: bool,
    pub step_size: f64,
}

/// One chain's state, its adaptation and its random stream.
pub struct Chain {
    x: Vec<f64>,
    logp: f64,
    grad: Vec<f64>,
    step_size: f64,
    inverse_mass: Vec<f64>,
    rng: ChaCha8Rng,
}

impl Chain {
    /// A chain at `init` (as [`LogDensity::reported`]), which must have a finite log density.
    pub fn new(target: &dyn LogDensity, init: &[f64], seed: u64) -> Result<Self, String> {
        let init = target.sampler_point(init);
        let mut grad = vec![0.0; target.dim()];
        let logp = target.log_density(&init, &mut grad);
        if !logp.is_finite() || grad.iter().any(|g| !g.is_finite()) {
            return Err(format!(
                "the initial point {init:?} has log density {logp}: not a point of the posterior's support"
            ));
        }
        let dim = target.dim();
        let mut chain = Chain {
            x: init,
            logp,
            grad,
            step_size: 0.1,
            inverse_mass: vec![1.0; dim],
            rng: ChaCha8Rng::seed_from_u64(seed),
        };
        chain.step_size = chain.reasonable_step(target);
        Ok(chain)
    }

    /// A first step size at which one leapfrog step's acceptance is about ½ (Hoffman &
    /// Gelman 2014, Alg. 4).
    fn reasonable_step(&mut self, target: &dyn LogDensity) -> f64 {
        let mut step: f64 = 1.0;
        let accept = |chain: &mut Chain, step: f64| {
            let p = chain.momentum();
            chain.leapfrog(target, &p, step, 1).map_or(0.0, |(h, ..)| h)
        };
        let up = accept(self, step) > 0.5;
        for _ in 0..60 {
            let a = accept(self, step);
            if up != (a > 0.5) {
                break;
            }
            step = if up { step * 2.0 } else { step / 2.0 };
        }
        step
    }

    fn momentum(&mut self) -> Vec<f64> {
        let rng = &mut self.rng;
        self.inverse_mass
            .iter()
            .map(|m| {
                let z: f64 = StandardNormal.sample(rng);
                z / m.sqrt()
            })
            .collect()
    }

    fn kinetic(&self, p: &[f64]) -> f64 {
        0.5 * p
            .iter()
            .zip(&self.inverse_mass)
            .map(|(p, m)| p * p * m)
            .sum::<f64>()
    }

    /// `steps` leapfrog steps from the chain's state with momentum `p`: the acceptance
    /// probability and the end point (position, log density, gradient), or `None` if the
    /// trajectory left the support or diverged.
    #[allow(clippy::type_complexity)]
    fn leapfrog(
        &self,
        target: &dyn LogDensity,
        p: &[f64],
        step: f64,
        steps: usize,
    ) -> Option<(f64, Vec<f64>, f64, Vec<f64>)> {
        let h0 = self.kinetic(p) - self.logp;
        let (mut x, mut p, mut grad) = (self.x.clone(), p.to_vec(), self.grad.clone());
        let mut logp = self.logp;
        for _ in 0..steps {
            for (pi, g) in p.iter_mut().zip(&grad) {
                *pi += 0.5 * step * g;
            }
            for ((xi, pi), m) in x.iter_mut().zip(&p).zip(&self.inverse_mass) {
                *xi += step * m * pi;
            }
            logp = target.log_density(&x, &mut grad);
            if !logp.is_finite() {
                return None;
            }
            for (pi, g) in p.iter_mut().zip(&grad) {
                *pi += 0.5 * step * g;
            }
        }
        let error = self.kinetic(&p) - logp - h0;
        if !(error.is_finite() && error < DIVERGENCE) {
            return None;
        }
        Some(((-error).exp().min(1.0), x, logp, grad))
    }

    /// One HMC transition with the current step size and mass.
    pub fn transition(&mut self, target: &dyn LogDensity) -> Transition {
        let p = self.momentum();
        let jitter = 0.5 + self.rng.random::<f64>();
        let steps = ((PATH_LENGTH * jitter / self.step_size).ceil() as usize).clamp(1, MAX_STEPS);
        let (accept_stat, accepted, divergent) =
            match self.leapfrog(target, &p, self.step_size, steps) {
                Some((a, x, logp, grad)) => {
                    let accepted = self.rng.random::<f64>() < a;
                    if accepted {
                        (self.x, self.logp, self.grad) = (x, logp, grad);
                    }
                    (a, accepted, false)
                }
                None => (0.0, false, true),
            };
        Transition {
            accept_stat,
            accepted,
            divergent,
            step_size: self.step_size,
        }
    }

    /// Stan's warm-up schedule over `warmup` transitions: the first 15 % adapts the step size
    /// only; then doubling windows (from 25) estimate the diagonal mass, the step-size search
    /// restarting after each; the last 10 % adapts the step size with the final mass; then the
    /// averaged step size is frozen. `each` sees every warm-up state (in the sampler's
    /// space).
    fn warm_up(
        &mut self,
        target: &dyn LogDensity,
        warmup: usize,
        mut each: impl FnMut(&[f64], &Transition),
    ) {
        let mut averaging = DualAveraging::new(self.step_size, TARGET_ACCEPT);
        let start = warmup * 15 / 100;
        let end = warmup - warmup / 10;
        let mut window = 25;
        let mut window_end = start + window;
        let mut variances = VarianceEstimate::new(target.dim());
        for t in 0..warmup {
            let transition = self.transition(target);
            self.step_size = averaging.update(transition.accept_stat);
            each(&self.x, &transition);
            if warmup < 150 || t < start || t >= end {
                continue;
            }
            variances.add(&self.x);
            if t + 1 == window_end {
                if let Some(v) = variances.variances() {
                    self.inverse_mass = v;
                }
                variances = VarianceEstimate::new(target.dim());
                self.step_size = self.reasonable_step(target);
                averaging = DualAveraging::new(self.step_size, TARGET_ACCEPT);
                window *= 2;
                // The last window takes whatever is left before the final step-size phase.
                window_end = if t + 1 + 3 * window > end {
                    end
                } else {
                    t + 1 + window
                };
            }
        }
        self.step_size = averaging.settled();
    }
}

/// Every chain's states (warm-up included, as [`LogDensity::reported`]) and transitions.
#[derive(Clone, Debug, Default)]
pub struct ChainDraws {
    pub states: Vec<Vec<f64>>,
    pub transitions: Vec<Transition>,
}

/// What [`sample_until_converged`] did.
#[derive(Clone, Debug)]
pub struct Sampled {
    pub chains: Vec<ChainDraws>,
    pub warmup: usize,
    /// The worst R̂ and the smallest bulk or tail ESS over the watched coordinates at the end.
    pub rhat: f64,
    pub ess: f64,
    pub converged: bool,
}

impl Sampled {
    /// How many of the kept draws' transitions diverged, and how many there are.
    pub fn divergences(&self) -> (usize, usize) {
        self.chains.iter().fold((0, 0), |(d, n), c| {
            let kept = &c.transitions[self.warmup..];
            (
                d + kept.iter().filter(|t| t.divergent).count(),
                n + kept.len(),
            )
        })
    }
}

/// Runs one chain per initial point (as [`LogDensity::reported`]; chain c seeded with
/// `seeds[c]`), each on its own thread,
/// through warm-up and `settings.draws` draws, then doubles the draws until the watched
/// coordinates `watched(state)` of the reported states have R̂ ≤ `max_rhat` and bulk and
/// tail ESS ≥ `min_ess`, or
/// the draws reach `max_draws`.
pub fn sample_until_converged(
    target: &dyn LogDensity,
    inits: Vec<Vec<f64>>,
    seeds: &[u64],
    settings: Settings,
    watched: &(dyn Fn(&[f64]) -> Vec<f64> + Sync),
) -> Result<Sampled, String> {
    let mut chains: Vec<(Chain, ChainDraws)> = inits
        .into_iter()
        .zip(seeds)
        .map(|(init, &seed)| Ok((Chain::new(target, &init, seed)?, ChainDraws::default())))
        .collect::<Result<_, String>>()?;
    let run = |chains: &mut Vec<(Chain, ChainDraws)>, warmup: usize, draws: usize| {
        std::thread::scope(|scope| {
            for (chain, record) in chains.iter_mut() {
                scope.spawn(move || {
                    chain.warm_up(target, warmup, |x, t| {
                        record.states.push(target.reported(x));
                        record.transitions.push(*t);
                    });
                    for _ in 0..draws {
                        let t = chain.transition(target);
                        record.states.push(target.reported(&chain.x));
                        record.transitions.push(t);
                    }
                });
            }
        });
    };
    run(&mut chains, settings.warmup, settings.draws);
    let mut draws = settings.draws;
    loop {
        let (worst_rhat, least_ess) = diagnose(&chains, settings.warmup, watched)?;
        let converged = worst_rhat <= settings.max_rhat && least_ess >= settings.min_ess;
        if converged || draws >= settings.max_draws {
            return Ok(Sampled {
                chains: chains.into_iter().map(|(_, d)| d).collect(),
                warmup: settings.warmup,
                rhat: worst_rhat,
                ess: least_ess,
                converged,
            });
        }
        let more = draws.min(settings.max_draws - draws);
        run(&mut chains, 0, more);
        draws += more;
    }
}

/// The worst R̂ and the least bulk or tail ESS over the watched coordinates.
fn diagnose(
    chains: &[(Chain, ChainDraws)],
    warmup: usize,
    watched: &(dyn Fn(&[f64]) -> Vec<f64> + Sync),
) -> Result<(f64, f64), String> {
    let kept: Vec<Vec<Vec<f64>>> = chains
        .iter()
        .map(|(_, d)| d.states[warmup..].iter().map(|x| watched(x)).collect())
        .collect();
    let dim = kept[0][0].len();
    let (mut worst, mut least) = (0.0f64, f64::INFINITY);
    for j in 0..dim {
        let series: Vec<Vec<f64>> = kept
            .iter()
            .map(|c| c.iter().map(|x| x[j]).collect())
            .collect();
        let e =
            |r: Result<f64, _>| r.map_err(|e: crate::diagnostics::DiagnosticsError| e.to_string());
        worst = worst.max(e(rhat(&series))?);
        least = least.min(e(ess_bulk(&series))?).min(e(ess_tail(&series))?);
    }
    Ok((worst, least))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A correlated Gaussian with very different scales: N(μ, Σ).
    struct Normal2 {
        mean: [f64; 2],
        precision: [[f64; 2]; 2],
    }

    impl LogDensity for Normal2 {
        fn dim(&self) -> usize {
            2
        }
        fn log_density(&self, x: &[f64], grad: &mut [f64]) -> f64 {
            let d = [x[0] - self.mean[0], x[1] - self.mean[1]];
            let pd = [
                self.precision[0][0] * d[0] + self.precision[0][1] * d[1],
                self.precision[1][0] * d[0] + self.precision[1][1] * d[1],
            ];
            grad[0] = -pd[0];
            grad[1] = -pd[1];
            -0.5 * (d[0] * pd[0] + d[1] * pd[1])
        }
    }

    #[test]
    fn the_chains_converge_to_a_scaled_correlated_normal() {
        // Σ = [[100, 0.9·10·0.01], [·, 1e-4]]: sds 10 and 0.01, correlation 0.9.
        let (s1, s2, rho) = (10.0f64, 0.01f64, 0.9f64);
        let det = s1 * s1 * s2 * s2 * (1.0 - rho * rho);
        let precision = [
            [s2 * s2 / det, -rho * s1 * s2 / det],
            [-rho * s1 * s2 / det, s1 * s1 / det],
        ];
        let target = Normal2 {
            mean: [3.0, -1.0],
            precision,
        };
        let sampled = sample_until_converged(
            &target,
            vec![vec![0.0, 0.0]; 4],
            &[1, 2, 3, 4],
            Settings::default(),
            &|x| x.to_vec(),
        )
        .unwrap();
        assert!(sampled.converged, "R̂ {} ESS {}", sampled.rhat, sampled.ess);
        assert_eq!(
            sampled.divergences().0,
            0,
            "a normal has no divergent region"
        );
        let kept: Vec<&Vec<f64>> = sampled
            .chains
            .iter()
            .flat_map(|c| &c.states[sampled.warmup..])
            .collect();
        for (j, (mu, sd)) in [(3.0, s1), (-1.0, s2)].into_iter().enumerate() {
            let m = kept.iter().map(|x| x[j]).sum::<f64>() / kept.len() as f64;
            let v = kept.iter().map(|x| (x[j] - m).powi(2)).sum::<f64>() / kept.len() as f64;
            // The Monte Carlo error of the mean is sd/√ESS with ESS ≥ 400: 5 of them.
            assert!((m - mu).abs() < 5.0 * sd / 20.0, "mean {j}: {m} vs {mu}");
            // Of the sd, about sd/√(2·ESS).
            assert!(
                (v.sqrt() - sd).abs() < 5.0 * sd / 28.0,
                "sd {j}: {} vs {sd}",
                v.sqrt()
            );
        }
    }

    /// Neal's funnel in its centred form: v ~ N(0, 3²), x ~ N(0, eᵛ). The neck's curvature
    /// grows as e^−v, which no one step size follows.
    struct Funnel;

    impl LogDensity for Funnel {
        fn dim(&self) -> usize {
            2
        }
        fn log_density(&self, x: &[f64], grad: &mut [f64]) -> f64 {
            let (v, y) = (x[0], x[1]);
            let precision = (-v).exp();
            grad[0] = -v / 9.0 - 0.5 + 0.5 * y * y * precision;
            grad[1] = -y * precision;
            -v * v / 18.0 - 0.5 * v - 0.5 * y * y * precision
        }
    }

    #[test]
    fn trajectories_into_a_funnels_neck_are_counted_as_divergent() {
        let settings = Settings {
            draws: 1000,
            max_draws: 1000,
            ..Settings::default()
        };
        let sampled = sample_until_converged(
            &Funnel,
            vec![vec![0.0, 0.0]; 4],
            &[1, 2, 3, 4],
            settings,
            &|x| x.to_vec(),
        )
        .unwrap();
        let (divergent, kept) = sampled.divergences();
        assert_eq!(kept, 4000);
        assert!(divergent > 0, "no divergence in the funnel");
        let rejected = sampled
            .chains
            .iter()
            .flat_map(|c| &c.transitions[sampled.warmup..])
            .filter(|t| t.divergent)
            .all(|t| !t.accepted && t.accept_stat == 0.0);
        assert!(rejected, "a divergent trajectory is never accepted");
    }
}
