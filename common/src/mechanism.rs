//! The Gaussian mechanism (Räisä 2020, Thm 2.11): release `value + N(0, (s·Δ)²)` where Δ is the
//! L2 sensitivity and s the noise multiplier. Which RNG feeds it is the caller's decision;
//! a party always passes an OS-seeded CSPRNG.
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianMechanism {
    /// L2 sensitivity Δ of the released quantity.
    pub sensitivity: f64,
    /// Noise std divided by Δ.
    pub noise_multiplier: f64,
}

impl GaussianMechanism {
    pub fn std(&self) -> f64 {
        self.noise_multiplier * self.sensitivity
    }

    pub fn variance(&self) -> f64 {
        let s = self.std();
        s * s
    }

    /// `value + N(0, std²)`, one independent draw per entry.
    pub fn release<R: Rng + ?Sized>(&self, value: &[f64], rng: &mut R) -> Vec<f64> {
        let std = self.std();
        value
            .iter()
            .map(|v| {
                let z: f64 = StandardNormal.sample(rng);
                v + std * z
            })
            .collect()
    }
}
