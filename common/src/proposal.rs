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
}
