//! The logistic score's mean beyond the quadratic's straight line: a bend added to
//! `quadratic.rs`'s model.
//!
//! At window 0 about a centre θ_r a logistic GLM's summary is g = T·Σx̃(y − σ(c)) and
//! A = T·Σσ'(c)x̃x̃ᵀ (c = x̃ᵀθ_r). Given θ the score's mean is T·Σx̃(σ(x̃ᵀθ) − σ(c)), which
//! saturates away from the centre; the quadratic's linear mean AΔ does not, and where noise
//! leaves the posterior wide it pulls the slopes towards the centre (docs/design.md §3: over
//! 800 simulated data sets at d = 5, 20 000 rows and ε = 0.5, with the curvature known, the
//! linear mean's 90 % intervals covered 77.1 % and the exact mean's 89.9 %).
//!
//! The covariates are private, so the bend comes from a public model of them, x̃ ~ N(μ, S)
//! (`covariates.rs`: the moments the released curvature weighs them by, held within the
//! box, or the box's own where there is no intercept). Under it the predictor η = x̃ᵀθ is
//! N(μᵀθ, θᵀSθ) and Stein's lemma gives
//! E[x̃σ(η)] = μE σ + vE σ' with v = Sθ, whose Jacobian is
//! (μμᵀ + S)E σ' + (μvᵀ + vμᵀ)E σ'' + vvᵀE σ''' (the heat equation ∂E f/∂s² = ½E f''),
//! each a one-dimensional normal expectation ([`normal_expectations`]). With N(θ) = T·n·E[x̃σ(x̃ᵀθ)]
//! the score's mean becomes A·J_N(θ_r)⁻¹(N(θ) − N(θ_r)) = AΔ + h(θ, A), with
//! h = A·J_N(θ_r)⁻¹(N(θ) − N(θ_r) − J_N(θ_r)Δ): its slope at the centre stays the released
//! curvature's and the public model, scaled to that curvature, shapes only the terms of second
//! order and beyond. An unscaled h = N(θ) − N(θ_r) − J_N(θ_r)Δ (with the curvature known, over
//! the same 800 data sets, 89.7 %) flattened the mean where the latent A fell below J_N(θ_r),
//! and 2 of 200 posteriors at d = 3, ε 0.5 then never converged (docs/design.md §3).
//!
//! Given A, θ is then no longer exactly normal, but h is small next to AΔ, so `quadratic.rs`'s
//! non-centred form (θ = θ_r + m(A) + R⁻ᵀz) still suits it: the bend multiplies the
//! posterior by exp β(θ, A), β = ln N(ĝ; AΔ + h, C) − ln N(ĝ; AΔ, C) = rᵀC⁻¹h − ½hᵀC⁻¹h with
//! r = ĝ − AΔ and C = A + σ²I, and [`Bend::log_factor`] carries β's gradient through the
//! map from (z, A) to θ and through h's own A.
use nalgebra::{Cholesky, DMatrix, DVector, Dyn};

use super::covariates::CovariateModel;

/// The bend h(θ, A) of the score's mean under the public normal model of the covariates.
pub struct Bend {
    /// T·n.
    mass: f64,
    covariates: CovariateModel,
    centre: DVector<f64>,
    /// N(θ_r) and J_N(θ_r).
    at_centre: (DVector<f64>, DMatrix<f64>),
    /// J_N(θ_r)⁻¹.
    slope_inverse: DMatrix<f64>,
}

/// What the bend adds to the non-centred density at one point: its value, its gradient in z,
/// and its gradient G in A (dβ = tr(G dA), G symmetric).
pub struct Added {
    pub value: f64,
    pub grad_z: DVector<f64>,
    pub grad_a: DMatrix<f64>,
}

impl Bend {
    /// The bend for `rows` rows at temperature `temperature` under the model `covariates`
    /// of the design (an intercept's constant 1 included), about `centre`.
    pub fn new(temperature: f64, rows: u64, covariates: CovariateModel, centre: &[f64]) -> Self {
        assert_eq!(centre.len(), covariates.dim(), "one column per coefficient");
        let mut bend = Bend {
            mass: temperature * rows as f64,
            covariates,
            centre: DVector::from_column_slice(centre),
            at_centre: (DVector::zeros(0), DMatrix::zeros(0, 0)),
            slope_inverse: DMatrix::zeros(0, 0),
        };
        bend.at_centre = bend.mean(&bend.centre);
        bend.slope_inverse = bend
            .at_centre
            .1
            .clone()
            .try_inverse()
            .expect("J_N = T·n·E[σ'x̃x̃ᵀ] is positive definite");
        bend
    }

    /// N(θ) and its Jacobian.
    fn mean(&self, theta: &DVector<f64>) -> (DVector<f64>, DMatrix<f64>) {
        let (mean, jac) = self.covariates.sigmoid_moments(theta);
        (mean * self.mass, jac * self.mass)
    }

    /// N(θ) − N(θ_r) − J_N(θ_r)(θ − θ_r) and its Jacobian.
    fn beyond_line(&self, theta: &DVector<f64>) -> (DVector<f64>, DMatrix<f64>) {
        let (mean, jac) = self.mean(theta);
        let (m0, j0) = &self.at_centre;
        (mean - m0 - j0 * (theta - &self.centre), jac - j0)
    }

    /// The bend given A: h = A·v(θ), v = J_N(θ_r)⁻¹(N(θ) − N(θ_r)) − Δ, so that the score's
    /// mean AΔ + h = A·J_N(θ_r)⁻¹(N(θ) − N(θ_r)) is the public model's shape scaled to the
    /// released curvature; with v and h's Jacobian in θ at fixed A.
    pub(super) fn at(
        &self,
        a: &DMatrix<f64>,
        theta: &DVector<f64>,
    ) -> (DVector<f64>, DMatrix<f64>, DVector<f64>) {
        let (beyond, jac) = self.beyond_line(theta);
        let v = &self.slope_inverse * beyond;
        let scaled = a * &self.slope_inverse;
        (a * &v, scaled * jac, v)
    }

    /// β at the non-centred point (z, A), with θ − θ_r = m + R⁻ᵀz for θ's conditional mean
    /// less the centre m and the lower Cholesky factor R of its precision
    /// H = AC⁻¹A + P₀, whose mean is m = H⁻¹(AC⁻¹ĝ + p₀), and `c` the Cholesky factor of
    /// C = A + σ²I.
    pub fn log_factor(
        &self,
        a: &DMatrix<f64>,
        c: &Cholesky<f64, Dyn>,
        g_hat: &DVector<f64>,
        (m, r): (&DVector<f64>, &DMatrix<f64>),
        z: &DVector<f64>,
    ) -> Option<Added> {
        let d = z.len();
        let spread = r.transpose().solve_upper_triangular(z)?;
        let delta = m + &spread;
        let (h, jac_h, v) = self.at(a, &(&self.centre + &delta));
        let resid = g_hat - a * &delta;
        let e_h = c.solve(&h);
        let e_r = c.solve(&resid);
        let value = resid.dot(&e_h) - 0.5 * h.dot(&e_h);
        // ∂β/∂θ at fixed A.
        let w = jac_h.transpose() * (&e_r - &e_h) - a * &e_h;
        let grad_z = r.solve_lower_triangular(&w)?;
        let b = r.transpose().solve_upper_triangular(&grad_z)?;
        // wᵀdθ through m(A) and R(A): with K = C⁻¹A (symmetric: A and C commute),
        // dH = dA·K + K·dA − K·dA·K, so ⟨dH, X⟩ = ⟨dA, XK + KX − KXK⟩; dm = H⁻¹(dq − dH m)
        // with dq = (I − K)dA·C⁻¹ĝ; and d(R⁻ᵀz) = −R⁻ᵀΦ(R⁻¹dH R⁻ᵀ)ᵀz, Φ the lower triangle
        // with half the diagonal (the Cholesky factor's differential), so its product with w
        // is −⟨dH, R⁻ᵀΦ(z(R⁻¹w)ᵀ)R⁻¹⟩.
        let k = c.solve(a);
        let mut phi = z * grad_z.transpose();
        for i in 0..d {
            phi[(i, i)] *= 0.5;
            for j in i + 1..d {
                phi[(i, j)] = 0.0;
            }
        }
        // R⁻ᵀΦR⁻¹ by two triangular solves: Y = ΦR⁻¹ (Yᵀ = R⁻ᵀΦᵀ), then R⁻ᵀY.
        let rt = r.transpose();
        let y = rt.solve_upper_triangular(&phi.transpose())?.transpose();
        let x = -(&b * m.transpose()) - rt.solve_upper_triangular(&y)?;
        let through_theta = &x * &k + &k * &x - &k * &x * &k
            + (DMatrix::identity(d, d) - &k) * &b * c.solve(g_hat).transpose();
        // ∂β/∂A at fixed θ, through r, C and h = Av.
        let explicit = -(&e_h * delta.transpose()) - &e_r * e_h.transpose()
            + &e_h * e_h.transpose() * 0.5
            + (&e_r - &e_h) * v.transpose();
        let total = through_theta + explicit;
        Some(Added {
            value,
            grad_z,
            grad_a: (&total + total.transpose()) * 0.5,
        })
    }
}

/// E σ, E σ', E σ'', E σ''' of η ~ N(location, spread²), by the trapezoid rule in the
/// standard normal z over |z| ≤ 9 (the tails beyond hold 2·10⁻¹⁹). The integrand is analytic
/// within |Im z| < π/spread (σ's poles at ±iπ), so a step δ errs by about
/// exp(−2π²/(spread·δ)) (Trefethen & Weideman 2014, Sec. 5): δ = min(¼, ½/spread) keeps that
/// under 10⁻¹⁷ at any spread. A fixed Gauss–Hermite rule does not: with 40 nodes the Stein
/// identities' Jacobian differed from the mean's differences by 40 % at the spread 4.4 a
/// d = 5 posterior reached, and its sampler's step size collapsed. The nodes stop at
/// 2·2 048 + 1 (spread ≈ 230), where the prior leaves no mass: warm-up's wild early points
/// otherwise cost millions of nodes each.
pub(super) fn normal_expectations(location: f64, spread: f64) -> [f64; 4] {
    let step = (0.5 / spread).min(0.25);
    let half = ((9.0 / step).ceil() as i64).min(2048);
    let step = 9.0 / half as f64;
    let weight = step / (2.0 * std::f64::consts::PI).sqrt();
    let mut e = [0.0; 4];
    for k in -half..=half {
        let z = k as f64 * step;
        let w = weight * (-0.5 * z * z).exp();
        let p = 1.0 / (1.0 + (-(location + spread * z)).exp());
        let d1 = p * (1.0 - p);
        e[0] += w * p;
        e[1] += w * d1;
        e[2] += w * d1 * (1.0 - 2.0 * p);
        e[3] += w * d1 * (1.0 - 6.0 * p + 6.0 * p * p);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule against what holds exactly: E σ = ½ at location 0 (σ − ½ is odd), E σ' is
    /// σ' itself at spread 0, and each expectation's derivative in the location is the next
    /// one's, at spreads up to 25.
    #[test]
    fn the_expectations_match_closed_forms_and_each_other() {
        for spread in [0.0, 0.3, 2.0, 6.0, 25.0] {
            let e = normal_expectations(0.0, spread);
            assert!(
                (e[0] - 0.5).abs() < 1e-14,
                "E σ at spread {spread}: {}",
                e[0]
            );
            for location in [-3.0, 0.4, 2.5] {
                let e = normal_expectations(location, spread);
                let h = 1e-5;
                let (up, down) = (
                    normal_expectations(location + h, spread),
                    normal_expectations(location - h, spread),
                );
                for k in 0..3 {
                    let fd = (up[k] - down[k]) / (2.0 * h);
                    assert!(
                        (fd - e[k + 1]).abs() < 1e-8,
                        "∂E σ^({k})/∂location at ({location}, {spread}): {fd} against {}",
                        e[k + 1]
                    );
                }
            }
        }
        let p = 1.0 / (1.0 + (-0.7f64).exp());
        let e = normal_expectations(0.7, 0.0);
        assert!((e[1] - p * (1.0 - p)).abs() < 1e-15);
    }

    #[test]
    fn the_jacobian_is_the_means_derivative_and_the_bend_vanishes_to_first_order() {
        let design = [[1.0, 1.0], [-2.0, 2.0], [0.0, 1.0], [-1.0, 3.0]];
        let centre = DVector::from_vec(vec![0.3, -0.8, 1.1, 0.4]);
        let bend = Bend::new(
            0.7,
            5_000,
            CovariateModel::of_box(&design),
            centre.as_slice(),
        );
        let (h, jac) = bend.beyond_line(&centre);
        assert!(h.norm() < 1e-9 && jac.norm() < 1e-9);
        // The second point's predictor has spread 4 (where a Gauss–Hermite rule failed).
        for theta in [vec![0.9, 0.5, -1.7, 0.2], vec![0.0, 1.8, -3.0, 1.6]] {
            let theta = DVector::from_vec(theta);
            let (_, jac) = bend.mean(&theta);
            for k in 0..4 {
                let step = 1e-6;
                let (mut up, mut down) = (theta.clone(), theta.clone());
                up[k] += step;
                down[k] -= step;
                let fd = (bend.mean(&up).0 - bend.mean(&down).0) / (2.0 * step);
                for j in 0..4 {
                    assert!(
                        (fd[j] - jac[(j, k)]).abs() < 1e-5 * (1.0 + fd[j].abs()),
                        "∂N{j}/∂θ{k}: {} against {}",
                        fd[j],
                        jac[(j, k)]
                    );
                }
            }
        }
    }

    #[test]
    fn the_mean_matches_uniform_covariates_by_monte_carlo() {
        // Four uniform features: their predictor is close to normal, as the model takes it.
        use rand::{RngExt, SeedableRng};
        let design = [
            [1.0, 1.0],
            [-2.0, 2.0],
            [-2.0, 2.0],
            [-2.0, 2.0],
            [-2.0, 2.0],
        ];
        let theta = [0.4, 1.2, -0.7, 0.5, 0.9];
        let bend = Bend::new(1.0, 1, CovariateModel::of_box(&design), &[0.0; 5]);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let n = 400_000;
        let mut sum = [0.0; 5];
        for _ in 0..n {
            let x: Vec<f64> = (0..4).map(|_| rng.random_range(-2.0..2.0)).collect();
            let eta = theta[0] + (0..4).map(|j| theta[j + 1] * x[j]).sum::<f64>();
            let p = 1.0 / (1.0 + (-eta).exp());
            sum[0] += p;
            for j in 0..4 {
                sum[j + 1] += x[j] * p;
            }
        }
        let (mean, _) = bend.mean(&DVector::from_column_slice(&theta));
        for j in 0..5 {
            // The normal model's own error on uniform covariates (up to 0.012 here; Monte
            // Carlo's sd ~0.001) is well under what a wrong term would leave: Stein's
            // vE σ' alone is ~0.2 in each feature's entry.
            assert!(
                (sum[j] / n as f64 - mean[j]).abs() < 0.02,
                "E[x̃{j}σ(η)]: {} by Monte Carlo, {} by the model",
                sum[j] / n as f64,
                mean[j]
            );
        }
    }

    /// Off the box's centre the release's covariate model (`covariates.rs`) follows the
    /// score's mean where the box's cannot: rows uniform over the upper half of [−2, 2]²,
    /// the bent mean AΔ + h = A·J_N⁻¹(N(θ) − N(θ_r)) against the rows' own
    /// Σx̃(σ(x̃ᵀθ) − σ(c)), relative to its norm.
    #[test]
    fn the_release_s_covariate_model_follows_covariates_off_the_box_s_centre() {
        use rand::{RngExt, SeedableRng};
        let design = [[1.0, 1.0], [-2.0, 2.0], [-2.0, 2.0]];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let rows: Vec<DVector<f64>> = (0..20_000)
            .map(|_| {
                let x = [rng.random_range(0.0..2.0), rng.random_range(0.0..2.0)];
                DVector::from_vec(vec![1.0, x[0], x[1]])
            })
            .collect();
        let sigmoid = |eta: f64| 1.0 / (1.0 + (-eta).exp());
        let centre = DVector::from_vec(vec![0.2, 0.5, -0.3]);
        let theta = DVector::from_vec(vec![-0.6, 1.4, 0.3]);
        let (mut a, mut truth) = (DMatrix::zeros(3, 3), DVector::zeros(3));
        for x in &rows {
            let p = sigmoid(x.dot(&centre));
            a += x * x.transpose() * (p * (1.0 - p));
            truth += x * (sigmoid(x.dot(&theta)) - p);
        }
        let line = &a * (&theta - &centre);
        let error = |covariates: CovariateModel| {
            let bend = Bend::new(1.0, rows.len() as u64, covariates, centre.as_slice());
            let (h, _, _) = bend.at(&a, &theta);
            (&line + h - &truth).norm() / truth.norm()
        };
        let released = error(CovariateModel::as_released(
            &a,
            &design,
            true,
            centre.as_slice(),
        ));
        let boxed = error(CovariateModel::of_box(&design));
        let straight = (&line - &truth).norm() / truth.norm();
        // Measured: 0.007 against 0.238, and the straight line AΔ's 0.284.
        assert!(
            released < 0.03 && boxed > 0.15 && straight > 0.15,
            "relative errors: the release's model {released:.3}, the box's {boxed:.3}, the straight line's {straight:.3}"
        );
    }
}
