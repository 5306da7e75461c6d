//! The noise-aware posterior of a poisson GLM's summary, whose score is not linear in θ.
//!
//! At window 0 about a centre θ_r the summary is g = T·Σ(y − e^c)x̃ and A = T·Σe^c x̃x̃ᵀ
//! (c = x̃ᵀθ_r, intercept first: x̃₀ = 1). Given θ the score's mean is
//! T·Σx̃(e^(c + x̃ᵀΔ) − e^c), Δ = θ − θ_r: exponential in Δ, so the linear mean AΔ of
//! `quadratic.rs` pulls the intercept up wherever the posterior is wide (on simulated poisson
//! GLMs, d = 3, 2 000 rows, ε = 10: the true intercept 0.7 posterior sds below the mean on
//! average, 90 % intervals covering 85 %).
//!
//! The mean is a sum over the covariates of e^(x̃ᵀΔ) weighted by e^c, so it follows from
//! the covariates' distribution tilted at the centre. Model that distribution as normal (as
//! Bernstein & Sheldon 2019, Sec. 4, model regression covariates): mass Z = T·Σe^c, mean μ
//! (μ₀ = 1) and covariance S (zero in the intercept's row and column). Its moment
//! generating function gives, with K = μᵀΔ + ½ΔᵀSΔ, E = e^K and ν = μ + SΔ,
//!
//! - g | θ ~ N(m, V), m = Z(Eν − μ), V = Z·E·(S + ννᵀ): the CLT's normal with the tilted
//!   covariates' mean and second moment (Kulkarni et al. 2021, Sec. 3; the same convention
//!   as `quadratic.rs`, V = A at Δ = 0, whatever the temperature);
//! - A = Z(S + μμᵀ): (Z, μ, S) is A itself, reparametrised. Â measures it as in
//!   `quadratic.rs`, Âₐᵦ ~ N(Aₐᵦ, σ²) for a ≤ b;
//! - ĝ | θ, A ~ N(m, V + σ²I): the noise convolved in closed form.
//!
//! The prior on (Z, μ, S) is flat in A = Z(S + μμᵀ), within what the public box allows:
//! every cᵢ lies in [c_lo, c_hi], so ln Z ∈ ln(T·n) + [c_lo, c_hi]; a mean of covariates
//! within [loⱼ, hiⱼ] lies there, so each μⱼ is within it; their sd is at most
//! (hiⱼ − loⱼ)/2, so S is positive definite with Sⱼⱼ within (hiⱼ − loⱼ)²/4, the wall
//! softened into a normal fall-off over [`WALL`] of it so that the sampler's gradient stays
//! continuous. Unbounded, a Z or an S that the noise hides grows and makes the score say
//! more than it does. Within the bounds, flat in A is Jeffreys' prior for Â's measurement
//! (Âₐᵦ ~ N(Aₐᵦ, σ²): constant information); it is flat in (Z, μ, S) times the map's
//! Jacobian Z^(d − 1 + d(d − 1)/2), so ln Z carries Z^(d(d + 1)/2). Flat in (ln Z, μ, S)
//! instead, a smaller Z fits Â's entries with more of the shapes' prior volume, which pulls
//! Z down and S up. `quadratic.rs`'s prior ∝ det A (here Z^d det S) moved this model's
//! coverage both ways by 1–4 points (its box already keeps Z from zero), so it is not used. docs/design.md (§3, the summaries route) has the measurements behind
//! each choice, and the README's table the coverage.
//!
//! At Δ = 0 the mean's slope is A, so the model agrees with the linear one to first order;
//! without noise and at the mode it is the Laplace approximation, and where noise leaves the
//! posterior wide it follows the exponential. The sampler's coordinates are θ, then ln Z and
//! each μⱼ as the logit of their share of their range, then S's free block as LLᵀ, L lower
//! triangular with a log diagonal.
use std::sync::Arc;

use nalgebra::{DMatrix, DVector};

use super::quadratic::{Approximation, Release, positive_definite};
use super::{LogDensity, factor};
use crate::models::Model;
use crate::models::summaries::quadratic;

/// The power of det S in S's prior: 0, flat in A within the box (the module's comment says
/// why not `quadratic.rs`'s ∝ det A).
const FLAT_IN_A: f64 = 0.0;

/// p(θ, A | ĝ, Â) under the tilted normal model of the covariates.
pub struct TiltedPosterior {
    model: Arc<dyn Model>,
    release: Release,
    a_hat: DMatrix<f64>,
    /// ln Z's range: ln(T·n) + [c_lo, c_hi].
    log_mass: [f64; 2],
    /// Each design column's bounds (the intercept's first).
    columns: Vec<[f64; 2]>,
}

/// The width of the soft wall on each Sⱼⱼ, as a share of its bound.
pub const WALL: f64 = 0.05;

fn sigmoid(u: f64) -> f64 {
    1.0 / (1.0 + (-u).exp())
}

/// `v` in [lo, hi] as the logit of its share of the range, a little inside (0 for an empty
/// range).
fn logit_within(v: f64, [lo, hi]: [f64; 2]) -> f64 {
    if hi <= lo {
        return 0.0;
    }
    let share = ((v - lo) / (hi - lo)).clamp(1e-6, 1.0 - 1e-6);
    (share / (1.0 - share)).ln()
}

/// One coordinate mapped into [lo, hi]: (value, d value/du, ln of that derivative's
/// u-dependent part, its derivative in u).
fn within(u: f64, [lo, hi]: [f64; 2]) -> (f64, f64, f64, f64) {
    let s = sigmoid(u);
    let width = hi - lo;
    (
        lo + width * s,
        width * s * (1.0 - s),
        s.ln() + (1.0 - s).ln(),
        1.0 - 2.0 * s,
    )
}

/// A point of the sampler's space, unpacked, with what the gradient needs.
struct Unpacked {
    z: f64,
    ln_z: f64,
    mu: DVector<f64>,
    /// S's free block's factor.
    l: DMatrix<f64>,
    /// S, d×d, zero in row and column 0.
    s: DMatrix<f64>,
    /// ln of the transforms' Jacobians.
    log_jacobian: f64,
    /// ∂x/∂u of ln Z and the μⱼ (in that order), and their log-Jacobians' slopes.
    slopes: Vec<(f64, f64)>,
}

impl TiltedPosterior {
    /// The posterior of `release`, the federation's summary over `rows` rows in all.
    pub fn new(model: Arc<dyn Model>, release: Release, rows: u64) -> Self {
        assert_eq!(model.dim(), release.dim(), "summary dimension");
        assert!(release.dim() >= 1, "an intercept at least");
        assert!(
            [release.noise_variance, release.curvature_noise_variance]
                .iter()
                .all(|v| *v > 0.0 && v.is_finite()),
            "a released summary carries positive noise"
        );
        let d = release.dim();
        let a_hat = DMatrix::from_fn(d, d, |i, j| release.a[i][j]);
        let columns = quadratic(model.as_ref())
            .expect("a model with quadratic summaries")
            .design_box();
        assert_eq!(columns.len(), d, "one bound per coefficient");
        let [c_lo, c_hi] = columns
            .iter()
            .zip(&release.centre)
            .fold([0.0, 0.0], |[lo, hi], ([a, b], t)| {
                [lo + (t * a).min(t * b), hi + (t * a).max(t * b)]
            });
        let scale = (model.temperature() * rows as f64).ln();
        TiltedPosterior {
            model,
            release,
            a_hat,
            log_mass: [scale + c_lo, scale + c_hi],
            columns,
        }
    }

    fn d(&self) -> usize {
        self.release.dim()
    }

    /// A point to start from: θ the linear [`Approximation`]'s mode, (Z, μ, S) read off Â
    /// made positive definite and brought within the box's limits.
    pub fn initial(&self) -> Vec<f64> {
        let d = self.d();
        let p = d - 1;
        let mut x = Approximation::of(self.model.as_ref(), &self.release).mode;
        let floor = self.release.curvature_noise_variance.sqrt().max(1e-12);
        let a = positive_definite(&self.a_hat, floor);
        let u = logit_within(a[(0, 0)].ln(), self.log_mass);
        x.push(u);
        let z = within(u, self.log_mass).0.exp();
        let mu: Vec<f64> = (1..d)
            .map(|j| {
                within(
                    logit_within(a[(0, j)] / z, self.columns[j]),
                    self.columns[j],
                )
                .0
            })
            .collect();
        x.extend(
            mu.iter()
                .enumerate()
                .map(|(i, &m)| logit_within(m, self.columns[i + 1])),
        );
        let s = DMatrix::from_fn(p, p, |i, j| a[(i + 1, j + 1)] / z - mu[i] * mu[j]);
        let l = positive_definite(&s, 1e-9 * s.diagonal().amax().max(1e-300))
            .cholesky()
            .expect("positive definite")
            .l();
        factor::push(&mut x, &l);
        x
    }

    fn unpack(&self, x: &[f64]) -> Unpacked {
        let d = self.d();
        let p = d - 1;
        let mut slopes = Vec::with_capacity(d + p);
        let mut log_jacobian = 0.0;
        let mut take = |u: f64, range: [f64; 2]| {
            let (v, slope, log_j, log_j_slope) = within(u, range);
            slopes.push((slope, log_j_slope));
            log_jacobian += log_j;
            v
        };
        let ln_z = take(x[d], self.log_mass);
        let z = ln_z.exp();
        let mu = DVector::from_fn(d, |i, _| {
            if i == 0 {
                1.0
            } else {
                take(x[d + i], self.columns[i])
            }
        });
        let l = factor::read(&x[2 * d..], p);
        log_jacobian += factor::log_jacobian(&x[2 * d..], p, FLAT_IN_A);
        let free = &l * l.transpose();
        let s = DMatrix::from_fn(d, d, |i, j| {
            if i == 0 || j == 0 {
                0.0
            } else {
                free[(i - 1, j - 1)]
            }
        });
        Unpacked {
            z,
            ln_z,
            mu,
            l,
            s,
            log_jacobian,
            slopes,
        }
    }
}

impl LogDensity for TiltedPosterior {
    fn dim(&self) -> usize {
        let d = self.d();
        d + d * (d + 1) / 2
    }

    fn log_density(&self, x: &[f64], grad: &mut [f64]) -> f64 {
        let d = self.d();
        let p = d - 1;
        let s2 = self.release.noise_variance;
        let s2a = self.release.curvature_noise_variance;
        let theta = &x[..d];
        let un = self.unpack(x);
        let (z, mu, s) = (un.z, &un.mu, &un.s);
        let delta = DVector::from_fn(d, |i, _| theta[i] - self.release.centre[i]);
        let nu = mu + s * &delta;
        let e = (mu.dot(&delta) + 0.5 * delta.dot(&(s * &delta))).exp();
        let m_cov = s + &nu * nu.transpose();
        let mean = (&nu * e - mu) * z;
        let c = &m_cov * (z * e) + DMatrix::identity(d, d) * s2;
        let r = DVector::from_column_slice(&self.release.g) - &mean;
        let Some(chol) = c.cholesky() else {
            return f64::NEG_INFINITY;
        };
        let rho = chol.solve(&r);
        let c_inv = chol.inverse();
        let half_log_det: f64 = chol.l().diagonal().iter().map(|v| v.ln()).sum();
        let mut value = -0.5 * r.dot(&rho) - half_log_det;
        let w = &rho * rho.transpose() - &c_inv;
        let tr_wm = w.dot(&m_cov);
        // dℓ = ρᵀdm + ½tr(W dV), through dK and dν.
        let coef_k = z * e * (rho.dot(&nu) + 0.5 * tr_wm);
        let coef_nu = (&rho + &w * &nu) * (z * e);
        let mut d_z = rho.dot(&(&nu * e - mu)) + 0.5 * e * tr_wm;
        let mut d_mu = &delta * coef_k + &coef_nu - &rho * z;
        let sym = |m: DMatrix<f64>| (&m + m.transpose()) * 0.5;
        let mut g_s = &delta * delta.transpose() * (0.5 * coef_k)
            + sym(&coef_nu * delta.transpose())
            + &w * (0.5 * z * e);
        // Â's measurement of A = Z(S + μμᵀ), entry by entry over the upper triangle.
        let a_shape = s + mu * mu.transpose();
        let mut g_a = DMatrix::zeros(d, d);
        for i in 0..d {
            for j in i..d {
                let err = self.a_hat[(i, j)] - z * a_shape[(i, j)];
                value -= err * err / (2.0 * s2a);
                if i == j {
                    g_a[(i, i)] = err / s2a;
                } else {
                    g_a[(i, j)] = err / (2.0 * s2a);
                    g_a[(j, i)] = err / (2.0 * s2a);
                }
            }
        }
        // The soft wall on S's variances.
        for j in 1..d {
            let [lo, hi] = self.columns[j];
            let cap = 0.25 * (hi - lo) * (hi - lo);
            let over = s[(j, j)] - cap;
            if over > 0.0 {
                let width = WALL * cap;
                value -= 0.5 * (over / width).powi(2);
                g_s[(j, j)] -= over / (width * width);
            }
        }
        d_z += g_a.dot(&a_shape);
        d_mu += &g_a * mu * (2.0 * z);
        g_s += &g_a * z;
        // Flat in A: the map (ln Z, μ, S) → A has Jacobian Z^(d(d+1)/2).
        let mass_power = (d * (d + 1) / 2) as f64;
        value += mass_power * un.ln_z;
        value += self.model.log_prior(theta) + un.log_jacobian;
        if !value.is_finite() {
            return f64::NEG_INFINITY;
        }
        // ∂/∂θ = ∂/∂Δ = coef_k·ν + S·coef_ν, plus the prior's.
        self.model.grad_log_prior(theta, &mut grad[..d]);
        let d_delta = &nu * coef_k + s * &coef_nu;
        for i in 0..d {
            grad[i] += d_delta[i];
        }
        // Through the logit-scaled coordinates: ∂ln Z/∂u, ∂μⱼ/∂u, ∂sdⱼ/∂u.
        let chain = |k: usize, d_value: f64| {
            let (slope, log_j_slope) = un.slopes[k];
            d_value * slope + log_j_slope
        };
        grad[d] = chain(0, z * d_z + mass_power);
        for j in 1..d {
            grad[d + j] = chain(j, d_mu[j]);
        }
        let block = DMatrix::from_fn(p, p, |i, j| g_s[(i + 1, j + 1)]);
        factor::gradient(&block, &un.l, FLAT_IN_A, &mut grad[2 * d..]);
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{Family, GlmSpec, ModelSpec};
    use crate::noise_aware::assert_gradient;

    /// A d = 4 poisson summary about a centre off the prior's mode.
    fn posterior() -> TiltedPosterior {
        let model = ModelSpec::Glm(GlmSpec::example(Family::Poisson, 4))
            .build()
            .unwrap();
        let release = Release {
            centre: vec![0.2, -0.1, 0.4, 0.3],
            g: vec![12.0, -30.0, 5.0, 8.0],
            a: vec![
                vec![400.0, 20.0, -10.0, 30.0],
                vec![20.0, 150.0, 15.0, -5.0],
                vec![-10.0, 15.0, 170.0, 12.0],
                vec![30.0, -5.0, 12.0, 140.0],
            ],
            noise_variance: 25.0,
            curvature_noise_variance: 9.0,
        };
        TiltedPosterior::new(model, release, 400)
    }

    #[test]
    fn the_gradient_matches_finite_differences() {
        let post = posterior();
        let x: Vec<f64> = post
            .initial()
            .iter()
            .enumerate()
            .map(|(k, v)| v + 0.03 * ((k as f64 * 1.7).sin()))
            .collect();
        assert_eq!(x.len(), post.dim());
        assert_gradient(&post, &x, 1e-5);
        // Beyond the soft wall: S's first variance (L₁₁², coordinate 2d) above its bound
        // of 1 over features in [−1, 1].
        let mut beyond = x.clone();
        beyond[8] = (1.0 + 0.5 * WALL).sqrt().ln();
        let mut grad = vec![0.0; post.dim()];
        assert!(post.log_density(&beyond, &mut grad).is_finite());
        assert_gradient(&post, &beyond, 1e-5);
    }
}
