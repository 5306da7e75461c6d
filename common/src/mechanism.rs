//! The Gaussian mechanism (Räisä 2020, Thm 2.11), released exactly on a public grid.
//!
//! A party releases `value + noise` where the noise has standard deviation s·Δ (Δ the L2
//! sensitivity, s the noise multiplier). Floating-point Gaussian noise leaks the value through
//! the low bits of its output (Mironov 2012), so the release is made on integers instead:
//!
//! 1. the statistic is rounded to a public grid γ, a power of two about 2^−30 of the noise's
//!    standard deviation ([`grid_step`]); rounding moves each entry by at most γ/2, so the
//!    rounded statistic's L2 sensitivity is at most Δ + √d·γ for d entries, and the noise is
//!    calibrated to that (Kairouz, Liu & Steinke 2021 account for rounding the same way);
//! 2. discrete Gaussian noise N_Z(0, σ²/γ²) is added in grid units, sampled exactly with
//!    integer arithmetic from the caller's RNG ([`crate::discrete_gaussian`], Canonne,
//!    Kamath & Steinke 2020, Alg. 3); the integer times γ is the answer.
//!
//! # Which privacy bound holds, and why the Gaussian accountants still apply
//!
//! The accountants (`accountant/`) bound the **continuous** Gaussian mechanism. Rounding that
//! mechanism's output, round(k + Z) = k + round(Z) for an integer statistic k, is
//! post-processing and keeps its guarantee exactly. The discrete release differs from that
//! rounded one only in the law of its integer noise: N_Z(0, σ²) against round(N(0, σ²)), σ in
//! grid units. For every integer j with |j| ≤ Kσ the two probabilities agree up to a factor
//! e^{±ε₀} with ε₀ = (K² + 1)/(24σ²)·(1 + 10⁻³): N_Z's mass is f(j)/S with f the normal
//! density and 1 ≤ S ≤ 1 + 3e^{−2π²σ²} (Poisson summation); round(Z)'s is ∫_{−½}^{½} f(j + u)du
//! = f(j)·E_u[e^{−ju/σ² − u²/(2σ²)}], which lies between e^{−1/(24σ²)} (Jensen) and
//! sinh(a/2)/(a/2) ≤ e^{a²/24} with a = j/σ² ≤ K/σ. Beyond Kσ each law has mass at most
//! β = 3e^{−K²/2}. Over a lifetime of at most E entries released this way (the joint laws
//! compared entry by entry), any (ε, δ) guarantee the accountant gives the rounded continuous
//! releases holds for the exact ones as (ε + 2Eε₀, δ·e^{Eε₀} + Eβ(1 + e^{ε + Eε₀})).
//!
//! With σ ≥ 2^30 grid steps, E = [`MAX_RELEASES`]·[`MAX_ENTRIES`] = 2^40 and
//! K² = 2ε + 2 ln(1/δ) + 200 for the party's (ε, δ) (ε at most [`MAX_COVERED_EPSILON`]),
//! the ε shift 2Eε₀ is
//! [`exact_noise_reservation`] (1.8·10⁻⁵ at ε = 1, δ = 10⁻⁵; 1.8·10⁻⁴ at ε = 1 000) and the
//! tail term is below 10⁻³⁰·δ. A party asks its accountant for ε less the reservation and δ
//! shrunk to cover both ([`accounting_budget`]) (`party/src/budget.rs`), refuses a statistic of
//! more than [`MAX_ENTRIES`] entries and a plan that would take it past [`MAX_RELEASES`]
//! releases: every accountant (analytic, zCDP, RDP, PLD) stays valid for what it releases.
//! Above ε = [`MAX_COVERED_EPSILON`] the reservation is taken at that ε and the tail term,
//! which grows as e^{ε − 10⁴}, is not covered: such a budget is a non-private setting (the
//! samplers' non-private limit), and a party says so when it starts.
//!
//! # Variance
//!
//! The noise's variance is Var N_Z(0, σ²/γ²)·γ² (σ²/γ² rounded up to an integer first, never
//! less noise than asked for). With σ/γ ≥ 2^30 it equals σ² to double precision: the
//! rounding up adds at most 2^−60 relative, and σ² − Var N_Z(0, σ²) < 8π²σ⁴e^{−2π²σ²} in grid
//! units ([`crate::discrete_gaussian`]). The penalty correction, Barker's decomposition and
//! HMC use it as σ². The rounding of the statistic is a deterministic error of at most γ/2 ≈
//! 5·10⁻¹⁰·σ per entry, far below the noise.
use rand::Rng;

use crate::discrete_gaussian::DiscreteGaussian;

/// The noise's standard deviation in grid steps is at least 2^GRID_BITS.
pub const GRID_BITS: i32 = 30;
/// The most entries one release may have.
pub const MAX_ENTRIES: usize = 1024;
/// The most releases one party may make in its lifetime.
pub const MAX_RELEASES: u64 = 1 << 30;
/// The largest ε whose guarantee the reservation covers (module doc).
pub const MAX_COVERED_EPSILON: f64 = 1e4;

/// What a party with budget (ε, δ) reserves from ε, and (as a fraction) from δ, for
/// releasing exact discrete noise instead of the continuous Gaussian its accountant bounds:
/// 2·E·ε₀ = E·(K² + 1)/(12σ²)·1.001 with E = 2^40 entries, σ = 2^30 grid steps and
/// K² = 2ε + 2 ln(1/δ) + 200, ε at most [`MAX_COVERED_EPSILON`] (module doc).
pub fn exact_noise_reservation(epsilon: f64, delta: f64) -> f64 {
    let entries = MAX_RELEASES as f64 * MAX_ENTRIES as f64;
    let sigma_sq = 2f64.powi(2 * GRID_BITS);
    let k_sq = 2.0 * epsilon.min(MAX_COVERED_EPSILON) + 2.0 * (1.0 / delta).ln() + 200.0;
    entries * (k_sq + 1.0) / (12.0 * sigma_sq) * 1.001
}

/// The (ε, δ) a party with budget (ε, δ) asks its accountant about: ε less the reservation r,
/// and δ·e^{−r/2}·(1 − 2^−40), so that the accountant's δ times e^{Eε₀} = e^{r/2} plus the
/// tail term (below 10⁻³⁰·δ) is still at most δ (module doc); the 2^−40 also covers the
/// rounding of these products.
pub fn accounting_budget(epsilon: f64, delta: f64) -> (f64, f64) {
    let r = exact_noise_reservation(epsilon, delta);
    (
        epsilon - r,
        delta * (-r / 2.0).exp() * (1.0 - 2f64.powi(-40)),
    )
}

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

    /// The mechanism a release of `entries` entries actually runs: the statistic rounded to
    /// the public grid of this mechanism's noise, its sensitivity Δ + √entries·γ, the noise
    /// multiplier unchanged. `None` for noise 0 (a statistic of sensitivity 0 is public: it
    /// needs no noise), a grid that would be subnormal, or s·√entries of 2^29 or more (the
    /// rounding would then grow the noise out of the exact sampler's range).
    pub fn on_grid(&self, entries: usize) -> Option<GridGaussian> {
        if self.noise_multiplier * (entries as f64).sqrt() >= MAX_SPREAD {
            return None;
        }
        let grid = grid_step(self.std())?;
        Some(GridGaussian {
            mechanism: GaussianMechanism {
                sensitivity: self.sensitivity + (entries as f64).sqrt() * grid,
                noise_multiplier: self.noise_multiplier,
            },
            grid,
        })
    }
}

/// The public grid step for noise of standard deviation about σ: 2^(⌊log₂ σ⌋ − GRID_BITS),
/// read off σ's exponent bits (the same on every machine). `None` unless σ is a normal
/// positive number whose grid is normal too.
pub fn grid_step(sigma: f64) -> Option<f64> {
    if !(sigma.is_finite() && sigma >= f64::MIN_POSITIVE) {
        return None;
    }
    let exponent = ((sigma.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let e = exponent - GRID_BITS;
    (e >= -1022).then(|| f64::from_bits(((e + 1023) as u64) << 52))
}

/// A Gaussian mechanism released on its grid ([`GaussianMechanism::on_grid`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GridGaussian {
    /// The mechanism with the rounding in its sensitivity: the accountant's multiplier, and
    /// the noise's standard deviation s·(Δ + √d·γ).
    pub mechanism: GaussianMechanism,
    /// The public grid step γ.
    pub grid: f64,
}

impl GridGaussian {
    /// The variance of the noise this mechanism adds (module doc: σ² to double precision).
    pub fn variance(&self) -> f64 {
        self.mechanism.variance()
    }

    /// `value` rounded to the grid plus exact discrete Gaussian noise of standard deviation
    /// `std` (this mechanism's, or less: what tops a statistic's own variance up to it),
    /// one independent draw per entry, as multiples of the grid.
    pub fn release<R: Rng + ?Sized>(&self, value: &[f64], std: f64, rng: &mut R) -> Vec<f64> {
        self.release_steps(value, std, rng)
            .into_iter()
            // k·γ is exact for |k| < 2^53 (γ a power of two), rounded beyond: either way a
            // function of the integer alone.
            .map(|k| k as f64 * self.grid)
            .collect()
    }

    /// [`Self::release`] in grid steps: the integers secure aggregation masks and sums. A
    /// `std` below 2^−16 grid steps adds nothing (such noise is 0 but with probability
    /// below e^{−2^31}).
    pub fn release_steps<R: Rng + ?Sized>(
        &self,
        value: &[f64],
        std: f64,
        rng: &mut R,
    ) -> Vec<i128> {
        let g = self.grid;
        let noise = (std >= g * TINY).then(|| {
            DiscreteGaussian::from_sigma_and_step(std.min(self.mechanism.std()), g)
                .expect("σ/γ < 2^32, as GaussianMechanism::on_grid admits")
        });
        value
            .iter()
            // v/γ is exact: γ is a power of two.
            .map(|v| (v / g).round() as i128 + noise.map_or(0, |n| n.sample(rng)))
            .collect()
    }
}

/// Noise below this many grid steps is none.
const TINY: f64 = 1.0 / 65536.0;
/// The largest s·√entries a grid release admits: its rounding then adds at most 2^−1 to
/// σ/γ's 2^30 to 2^31, so σ stays within the exact sampler's range (about 2^31.7 steps).
const MAX_SPREAD: f64 = (1u64 << 29) as f64;

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn the_grid_is_a_power_of_two_2_to_the_30_below_sigma() {
        for sigma in [1e-150, 3e-7, 0.5, 1.0, 1.5, 2.0, 1234.5, 1e150] {
            let g = grid_step(sigma).unwrap();
            assert_eq!(g.to_bits() & ((1u64 << 52) - 1), 0, "{g} is a power of two");
            let r = sigma / g;
            assert!((2f64.powi(30)..2f64.powi(31)).contains(&r), "σ/γ = {r}");
        }
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-310, 1e-300] {
            assert_eq!(grid_step(bad), None, "{bad}");
        }
    }

    /// The reservation at (ε, δ): the stated figures, and the tail term it leaves, 3·E·
    /// e^{−K²/2}·(1 + e^ε), far below 10⁻³⁰·δ.
    #[test]
    fn the_reservation_covers_the_closeness_bound() {
        let r = exact_noise_reservation(1.0, 1e-5);
        assert!((1.7e-5..1.9e-5).contains(&r), "{r}");
        let r = exact_noise_reservation(1000.0, 1e-5);
        assert!((1.7e-4..1.8e-4).contains(&r), "{r}");
        let entries = (MAX_RELEASES as f64) * MAX_ENTRIES as f64;
        for (eps, delta) in [(0.1f64, 1e-12f64), (10.0, 1e-5), (300.0, 0.1)] {
            let k_sq = 2.0 * eps + 2.0 * (1.0 / delta).ln() + 200.0;
            let log_tail = (3.0 * entries * 2.0).ln() - k_sq / 2.0 + eps;
            assert!(log_tail < (1e-30 * delta).ln(), "ε {eps}, δ {delta}");
        }
    }

    #[test]
    fn releases_are_on_the_grid_and_public_statistics_pass_unchanged() {
        let m = GaussianMechanism {
            sensitivity: 0.3,
            noise_multiplier: 2.0,
        };
        let g = m.on_grid(4).unwrap();
        assert_eq!(g.grid, grid_step(0.6).unwrap());
        assert_eq!(g.mechanism.sensitivity, 0.3 + 2.0 * g.grid);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let out = g.release(&[1.0, -2.5, 1e6, 0.0], g.mechanism.std(), &mut rng);
        for v in &out {
            assert_eq!((v / g.grid).fract(), 0.0, "{v} is on the grid");
        }
        // No noise: the value rounded to the grid.
        let v = 0.25 + 0.3 * g.grid;
        assert_eq!(g.release(&[v, 7.0], 0.0, &mut rng), vec![0.25, 7.0]);
        let zero = GaussianMechanism {
            sensitivity: 0.0,
            noise_multiplier: 2.0,
        };
        assert_eq!(zero.on_grid(1), None);
        let wide = GaussianMechanism {
            sensitivity: 1.0,
            noise_multiplier: 2f64.powi(28),
        };
        assert!(wide.on_grid(3).is_some() && wide.on_grid(4).is_none());
    }
}
