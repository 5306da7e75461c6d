//! The noise-aware posterior of one quadratic summary with its curvature A latent
//! (`noise_aware/quadratic.rs`), computed without the product's sampler: A by importance
//! sampling, θ given A in closed form. It checks the sampler, and it measures what the
//! latent curvature alone does to calibration, in a model where nothing else is
//! approximated.
use fedmcmc_common::noise_aware::quadratic::Release;
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use statrs::function::erf::erfc;

/// θ's independent normal prior.
pub struct NormalPrior<'a> {
    pub mean: &'a [f64],
    pub sd: &'a [f64],
}

/// The marginals of θ: a weighted mixture, over draws of A, of θ's normal given A.
pub struct LatentMarginals {
    weights: Vec<f64>,
    /// θ's conditional means and sds given each draw of A, by draw then coefficient.
    means: Vec<Vec<f64>>,
    sds: Vec<Vec<f64>>,
}

impl LatentMarginals {
    /// The posterior of the module's comment under the prior ∝ det(A)^`det_power` on the
    /// positive definite A. The proposal draws A's upper triangle from Â's own measurement,
    /// N(Âₐᵦ, σ²/κ²) entry by entry: that is the posterior's factor for Â, so each draw's
    /// weight is the rest, det(A)^`det_power` times N(ĝ; Ab, S), S = A + σ²I + AVA,
    /// b = μ₀ − θ_r (θ integrated out under its prior N(μ₀, V)).
    pub fn latent(
        release: &Release,
        prior: &NormalPrior,
        det_power: f64,
        draws: usize,
        rng: &mut impl Rng,
    ) -> Self {
        let g = DVector::from_column_slice(&release.g);
        Self::latent_moved(release, prior, det_power, draws, rng, |_| (g.clone(), 0.0))
    }

    /// [`LatentMarginals::latent`] for a release pooled from releases at several centres,
    /// whose pooled gradient depends on A, which moves each to the release's centre:
    /// `moved(A)` gives that gradient and the log-likelihood of whatever else the releases
    /// say of A (their contrasts), which joins each draw's weight.
    pub fn latent_moved(
        release: &Release,
        prior: &NormalPrior,
        det_power: f64,
        draws: usize,
        rng: &mut impl Rng,
        moved: impl Fn(&DMatrix<f64>) -> (DVector<f64>, f64),
    ) -> Self {
        let d = release.centre.len();
        let a_hat = DMatrix::from_fn(d, d, |i, j| release.a[i][j]);
        let sd_a = release.curvature_noise_variance.sqrt();
        let terms = Terms::of(release, prior);
        let (mut log_weights, mut out) = (Vec::new(), Self::empty());
        for _ in 0..draws {
            let mut a = a_hat.clone();
            for i in 0..d {
                for j in i..d {
                    let z: f64 = StandardNormal.sample(rng);
                    a[(i, j)] += sd_a * z;
                    a[(j, i)] = a[(i, j)];
                }
            }
            let Some(det) = a.clone().cholesky().map(|c| c.determinant()) else {
                continue;
            };
            let s = &a + DMatrix::identity(d, d) * release.noise_variance + &a * &terms.v * &a;
            let s = s.cholesky().expect("S ⪰ σ²I");
            let (g, contrasts) = moved(&a);
            let r = &g - &a * &terms.offset;
            let log_det_s = 2.0 * s.l().diagonal().iter().map(|x| x.ln()).sum::<f64>();
            log_weights.push(
                det_power * det.ln() - 0.5 * r.dot(&s.solve(&r)) - 0.5 * log_det_s + contrasts,
            );
            out.push_conditional(release, &terms, &a, &g);
        }
        let top = log_weights
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = log_weights.iter().map(|l| (l - top).exp()).collect();
        let total: f64 = weights.iter().sum();
        out.weights = weights.iter().map(|w| w / total).collect();
        out
    }

    /// θ's posterior when A is known: normal given it.
    #[allow(
        dead_code,
        reason = "the latent-curvature example's oracle; the sampler's test keeps A latent"
    )]
    pub fn known(release: &Release, prior: &NormalPrior, a: &DMatrix<f64>) -> Self {
        let mut out = Self::empty();
        let g = DVector::from_column_slice(&release.g);
        out.push_conditional(release, &Terms::of(release, prior), a, &g);
        out.weights = vec![1.0];
        out
    }

    fn empty() -> Self {
        LatentMarginals {
            weights: Vec::new(),
            means: Vec::new(),
            sds: Vec::new(),
        }
    }

    /// θ given A: ĝ ~ N(A(θ − θ_r), C), C = A + σ²I, under the prior N(μ₀, V), so θ − θ_r
    /// has precision H = AC⁻¹A + V⁻¹ and mean H⁻¹(AC⁻¹ĝ + V⁻¹b).
    fn push_conditional(
        &mut self,
        release: &Release,
        terms: &Terms,
        a: &DMatrix<f64>,
        g: &DVector<f64>,
    ) {
        let d = a.nrows();
        let c = (a + DMatrix::identity(d, d) * release.noise_variance)
            .cholesky()
            .expect("C ⪰ σ²I");
        let a_c_inv = c.solve(a).transpose();
        let h = (&a_c_inv * a + &terms.v_inv).cholesky().expect("H ⪰ V⁻¹");
        let mean = h.solve(&(&a_c_inv * g + &terms.v_inv * &terms.offset));
        let covariance = h.inverse();
        self.means
            .push((0..d).map(|j| release.centre[j] + mean[j]).collect());
        self.sds
            .push((0..d).map(|j| covariance[(j, j)].sqrt()).collect());
    }

    /// P(θⱼ ≤ x).
    pub fn cdf(&self, j: usize, x: f64) -> f64 {
        (self.weights.iter().zip(&self.means).zip(&self.sds))
            .map(|((w, m), s)| w * 0.5 * erfc(-(x - m[j]) / (s[j] * std::f64::consts::SQRT_2)))
            .sum()
    }

    /// θⱼ's posterior mean and sd.
    pub fn moments(&self, j: usize) -> (f64, f64) {
        let parts = self.weights.iter().zip(&self.means).zip(&self.sds);
        let mean: f64 = parts.clone().map(|((w, m), _)| w * m[j]).sum();
        let second: f64 = parts
            .map(|((w, m), s)| w * (s[j] * s[j] + m[j] * m[j]))
            .sum();
        (mean, (second - mean * mean).max(0.0).sqrt())
    }

    /// The importance draws' effective number (Kish's): how precise the mixture is.
    pub fn effective_draws(&self) -> f64 {
        1.0 / self.weights.iter().map(|w| w * w).sum::<f64>()
    }
}

/// What every draw of A shares, computed once: b = μ₀ − θ_r, and V (the prior's
/// covariance) with its inverse.
struct Terms {
    offset: DVector<f64>,
    v: DMatrix<f64>,
    v_inv: DMatrix<f64>,
}

impl Terms {
    fn of(release: &Release, prior: &NormalPrior) -> Self {
        let d = release.centre.len();
        let v = DMatrix::from_fn(d, d, |i, j| {
            if i == j {
                prior.sd[i] * prior.sd[i]
            } else {
                0.0
            }
        });
        Terms {
            offset: DVector::from_fn(d, |i, _| prior.mean[i] - release.centre[i]),
            v_inv: v.clone().try_inverse().expect("a proper prior"),
            v,
        }
    }
}
