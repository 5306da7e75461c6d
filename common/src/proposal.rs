//! Proposals and their warm-up adaptation.
//!
//! The random walk's scale is adapted during warm-up from acceptance decisions only. Those
//! decisions are post-processing of DP releases, so adapting costs no privacy beyond the
//! warm-up releases themselves (DESIGN §3 "Proposals"); the scale is frozen afterwards, so
//! the chain after warm-up is a plain Markov chain with the right target.
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

/// Isotropic Gaussian random walk θ′ = θ + scale·z, z ~ N(0, I). Symmetric: ln q ratio = 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomWalk {
    pub scale: f64,
}

impl RandomWalk {
    pub fn propose<R: Rng + ?Sized>(&self, theta: &[f64], out: &mut [f64], rng: &mut R) {
        for (o, t) in out.iter_mut().zip(theta) {
            let z: f64 = StandardNormal.sample(rng);
            *o = t + self.scale * z;
        }
    }
}

/// Robbins-Monro adaptation of ln(scale) towards a target acceptance rate, with steps
/// γ_t = t^(−0.6) (diminishing, so the scale settles before it is frozen).
#[derive(Clone, Copy, Debug)]
pub struct ScaleAdaptation {
    pub target: f64,
    log_scale: f64,
    t: u64,
}

impl ScaleAdaptation {
    pub fn new(initial_scale: f64, target: f64) -> Self {
        ScaleAdaptation {
            target,
            log_scale: initial_scale.ln(),
            t: 0,
        }
    }

    /// Records one acceptance decision and returns the updated scale.
    pub fn update(&mut self, accepted: bool) -> f64 {
        self.t += 1;
        let gamma = (self.t as f64).powf(-0.6);
        self.log_scale += gamma * (f64::from(u8::from(accepted)) - self.target);
        self.scale()
    }

    pub fn scale(&self) -> f64 {
        self.log_scale.exp()
    }
}

/// Dual averaging of an HMC step size towards a target mean acceptance probability
/// (Hoffman & Gelman 2014, Alg. 5, with their γ = 0.05, t₀ = 10, κ = 0.75). During warm-up
/// [`DualAveraging::step_size`] explores; afterwards [`DualAveraging::settled`], the
/// weighted average of the iterates, is frozen. Fed acceptance probabilities of DP tests, it
/// is post-processing of releases.
#[derive(Clone, Copy, Debug)]
pub struct DualAveraging {
    target: f64,
    /// ln(10·ε₀): the iterates shrink towards ten times the initial step.
    mu: f64,
    h_bar: f64,
    log_step: f64,
    log_step_bar: f64,
    t: u64,
}

impl DualAveraging {
    const GAMMA: f64 = 0.05;
    const T0: f64 = 10.0;
    const KAPPA: f64 = 0.75;

    pub fn new(initial_step: f64, target: f64) -> Self {
        DualAveraging {
            target,
            mu: (10.0 * initial_step).ln(),
            h_bar: 0.0,
            log_step: initial_step.ln(),
            log_step_bar: initial_step.ln(),
            t: 0,
        }
    }

    /// Records one transition's acceptance probability and returns the next step size.
    pub fn update(&mut self, accept_prob: f64) -> f64 {
        self.t += 1;
        let t = self.t as f64;
        let w = 1.0 / (t + Self::T0);
        self.h_bar = (1.0 - w) * self.h_bar + w * (self.target - accept_prob);
        self.log_step = self.mu - t.sqrt() / Self::GAMMA * self.h_bar;
        let eta = t.powf(-Self::KAPPA);
        self.log_step_bar = eta * self.log_step + (1.0 - eta) * self.log_step_bar;
        self.step_size()
    }

    /// The step size to use now, during warm-up.
    pub fn step_size(&self) -> f64 {
        self.log_step.exp()
    }

    /// The averaged step size to freeze after warm-up.
    pub fn settled(&self) -> f64 {
        self.log_step_bar.exp()
    }
}

/// Running per-coordinate variances of warm-up draws (Welford), the diagonal inverse mass
/// matrix of HMC, regularised towards 1e-3 as Stan does so that a short window cannot give a
/// zero variance: (k/(k + 5))·v + 1e-3·5/(k + 5) for k draws.
#[derive(Clone, Debug)]
pub struct VarianceEstimate {
    count: u64,
    mean: Vec<f64>,
    m2: Vec<f64>,
}

impl VarianceEstimate {
    pub fn new(dim: usize) -> Self {
        VarianceEstimate {
            count: 0,
            mean: vec![0.0; dim],
            m2: vec![0.0; dim],
        }
    }

    pub fn add(&mut self, x: &[f64]) {
        self.count += 1;
        let k = self.count as f64;
        for ((m, m2), &v) in self.mean.iter_mut().zip(&mut self.m2).zip(x) {
            let d = v - *m;
            *m += d / k;
            *m2 += d * (v - *m);
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The regularised variances; `None` before two draws.
    pub fn variances(&self) -> Option<Vec<f64>> {
        (self.count >= 2).then(|| {
            let k = self.count as f64;
            self.m2
                .iter()
                .map(|m2| (k / (k + 5.0)) * m2 / (k - 1.0) + 1e-3 * 5.0 / (k + 5.0))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptation_moves_towards_the_target() {
        let mut a = ScaleAdaptation::new(1.0, 0.25);
        for _ in 0..10 {
            a.update(true);
        }
        assert!(a.scale() > 1.0, "always accepting must widen the walk");
        let mut b = ScaleAdaptation::new(1.0, 0.25);
        for _ in 0..10 {
            b.update(false);
        }
        assert!(b.scale() < 1.0, "never accepting must narrow the walk");
    }

    #[test]
    fn dual_averaging_finds_the_step_of_a_known_acceptance_curve() {
        // Acceptance e^(−ε²) reaches 0.65 at ε = √(−ln 0.65) ≈ 0.656.
        let mut a = DualAveraging::new(0.01, 0.65);
        for _ in 0..2000 {
            let eps = a.step_size();
            a.update((-eps * eps).exp());
        }
        let want = (-(0.65f64).ln()).sqrt();
        assert!((a.settled() - want).abs() < 0.02 * want, "{}", a.settled());
    }

    #[test]
    fn variance_estimate_is_welford_regularised() {
        let mut v = VarianceEstimate::new(2);
        assert!(v.variances().is_none());
        for x in [
            [1.0, 10.0],
            [2.0, 10.0],
            [3.0, 10.0],
            [4.0, 10.0],
            [5.0, 10.0],
        ] {
            v.add(&x);
        }
        let got = v.variances().unwrap();
        // Sample variance 2.5 and 0, weighted by 5/10 with 1e-3 at 5/10.
        assert!((got[0] - (0.5 * 2.5 + 0.5e-3)).abs() < 1e-12);
        assert!((got[1] - 0.5e-3).abs() < 1e-12);
    }
}
