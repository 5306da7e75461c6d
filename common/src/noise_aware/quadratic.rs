//! The noise-aware posterior of one quadratic summary (`models/summaries.rs`).
//!
//! The federation released ĝ = g + e_g and Â = A + e_A about a centre θ_r, every entry's
//! noise independent, N(0, σ²) in ĝ and N(0, σ²/κ²) in Â (one Gaussian release per party
//! of (g, κA), summed, κ the public curvature weight; σ² the sum of the parties'
//! variances, divided by m when m releases at one centre are averaged). The model, with
//! Δ = θ − θ_r:
//!
//! - g | θ, A ~ N(AΔ, A): by the central limit theorem the summed score has the mean and the
//!   covariance its quadratic model implies (Kulkarni et al. 2021, Sec. 3: the approximate
//!   sufficient statistics' normal approximation; Bernstein & Sheldon 2018, Sec. 4: the
//!   CLT for the sufficient statistics of an exponential family). For the gaussian GLM given
//!   its covariates this is exact: g = X̃ᵀ(y − X̃θ_r)/σ_y² ~ N(AΔ, A) with A = X̃ᵀX̃/σ_y². In
//!   the noiseless limit N(g; AΔ, A) ∝ exp(gᵀΔ − ½ΔᵀAΔ): the summary's own quadratic.
//! - A is latent: the release only measures it, Âₐᵦ ~ N(Aₐᵦ, σ²/κ²) for a ≤ b (the covariates
//!   are private; their public box is all the model assumes of them, and it enters through
//!   the row bound). Its prior is ∝ det A over the positive definite matrices
//!   ([`MEANS_PRIOR`]): flat in what the release measures, the means (AΔ, A) of (ĝ, Â),
//!   whose map from (θ, A) has Jacobian det A. For a normal location that prior is the one
//!   whose intervals match their frequentist coverage (Fraser & Reid 2002); flat in A
//!   alone, a nearly singular A, under which the release says nothing about θ, kept too
//!   much weight and the intervals over-covered.
//! - The noise of g is independent of A's, so marginally ĝ | θ, A ~ N(AΔ, A + σ²I): the noise
//!   convolved with the CLT's normal (Bernstein & Sheldon 2018, Sec. 3, with the Gaussian
//!   mechanism the convolution is closed form).
//! - For the logistic family the mean is bent beyond the straight line, AΔ + h(θ), by a
//!   public model of the covariates (`sigmoid.rs`): the score saturates where AΔ does not.
//!
//! The sampler works on (z, L) with A = LLᵀ, L lower triangular with a log diagonal, so A
//! stays positive definite; a flat prior on A carries the Jacobian 2^d Π L_jj^(d−j+1)
//! (Muirhead 1982, Thm 2.1.9; 1-based j), det A = Π L_jj² and the log diagonal one more
//! L_jj each. θ, normal given A, is z moved to its conditional mean and scaled by its
//! conditional covariance ([`QuadraticPosterior`]), and the chains report θ.
use std::sync::Arc;

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};

use super::covariates::CovariateModel;
use super::sigmoid::Bend;
use super::tilted::TiltedPosterior;
use super::{LogDensity, factor};
use crate::models::Model;
use crate::models::summaries::{QuadraticSummaries, quadratic};

/// The power of det A in the prior of a latent curvature A: 1, flat in the release's means
/// (the module's comment). Measured on the calibration example's 100 repetitions per row,
/// 50 % (90 %) coverage, flat in A → this prior: gaussian GLM, d = 3, 2 000 rows, ε 0.5
/// and 1: 52.0 (95.0) → 46.3 (91.7) and 58.7 (97.3) → 52.7 (96.3); logistic, the same rows:
/// 56.7 (91.7) → 52.0 (90.3) and 53.7 (92.0) → 50.0 (90.0); logistic, d = 5 and 6
/// (200 repetitions at ε 0.5 and 1): within a point, the intervals up to 18 % narrower.
/// A higher power, which would favour larger curvatures and so narrower intervals where the
/// logistic d = 3 ones err wide, was measured and not kept: ∝ (det A)² took its ε 0.5 row
/// (200 repetitions) only from 94.8 to 93.7 %, and (det A)¹ is Jeffreys's power for this
/// model (the information of (θ, A) has determinant ∝ (det A)²). In this model computed
/// exactly with A fixed (`examples/latent_curvature.rs`), no power calibrates every noise
/// level: at Â's noise a sixth of A, p = 0, 1, 2 cover 93.7, 92.9, 92.3 % (A known 89.6 %).
pub const MEANS_PRIOR: f64 = 1.0;

/// One quadratic summary as the federation released it (summed over the parties).
#[derive(Clone, Debug, PartialEq)]
pub struct Release {
    pub centre: Vec<f64>,
    pub g: Vec<f64>,
    /// The symmetric Â (its upper triangle as released, mirrored).
    pub a: Vec<Vec<f64>>,
    /// Noise variance of each entry of ĝ.
    pub noise_variance: f64,
    /// Noise variance of each entry of Â: the release carried A weighted by the summaries'
    /// curvature weight κ (`weight::curvature_weight`), so it is σ²/κ².
    pub curvature_noise_variance: f64,
}

impl Release {
    pub fn dim(&self) -> usize {
        self.centre.len()
    }

    pub(super) fn a_matrix(&self) -> DMatrix<f64> {
        let d = self.dim();
        DMatrix::from_fn(d, d, |i, j| self.a[i][j])
    }
}

/// The Gaussian approximation of the noise-aware posterior of one release with A held at Â
/// (made positive definite) and the prior's curvature at the centre: ĝ ~ N(AΔ, C),
/// C = A + σ²I, so the precision is H = AC⁻¹A + P and the mode θ_r + H⁻¹(AC⁻¹ĝ + ∇ln p(θ_r)).
/// Without noise this is one Newton step on the released quadratic; as the noise grows the
/// step shrinks towards the prior's mode instead of following a noisy ĝ, and the covariance
/// H⁻¹ widens only as far as the prior lets it. The pilots step to its mode and size the
/// finals' window by its covariance.
#[derive(Clone, Debug)]
pub struct Approximation {
    pub centre: Vec<f64>,
    pub mode: Vec<f64>,
    pub precision: DMatrix<f64>,
}

impl Approximation {
    pub fn of(model: &dyn Model, release: &Release) -> Self {
        // Noise can make Â indefinite; a direction it does not measure gets no curvature
        // (an eigenvalue floor of σ would claim a precision of about 1 there), only enough
        // that C stays invertible without noise.
        let a_hat = release.a_matrix();
        let scale = a_hat.diagonal().amax().max(1.0);
        let a = positive_definite(&a_hat, 1e-12 * scale);
        let (prior_grad, prior_curvature) = prior_quadratic(model, &release.centre);
        let c = noise_covariance(&a, release.noise_variance).expect("A + σ²I is positive definite");
        let g_hat = DVector::from_column_slice(&release.g);
        let (precision, rhs) = normal_given(&a, &c, &g_hat, &prior_grad, &prior_curvature);
        let step = match precision.clone().cholesky() {
            Some(chol) => chol.solve(&rhs),
            None => a.clone().cholesky().expect("positive definite").solve(&rhs),
        };
        Approximation {
            mode: release
                .centre
                .iter()
                .zip(step.iter())
                .map(|(c, s)| c + s)
                .collect(),
            centre: release.centre.clone(),
            precision,
        }
    }

    /// √(ΔᵀHΔ) for Δ = `to` − centre: about how many posterior sds apart the two points are.
    pub fn step_length(&self, to: &[f64]) -> f64 {
        let delta = DVector::from_fn(to.len(), |i, _| to[i] - self.centre[i]);
        delta.dot(&(&self.precision * &delta)).sqrt()
    }

    /// The covariance H⁻¹, if H is invertible.
    pub fn covariance(&self) -> Option<DMatrix<f64>> {
        self.precision.clone().try_inverse()
    }

    /// The marginal sds of θ, √diag(H⁻¹): where chains start is spread by them.
    pub fn sds(&self) -> Vec<f64> {
        match self.covariance() {
            Some(c) => (0..c.nrows()).map(|i| c[(i, i)].max(0.0).sqrt()).collect(),
            None => vec![0.0; self.mode.len()],
        }
    }
}

/// θ given the curvature `a` under the summary's model ĝ ~ N(AΔ, C), C = A + σ²I, and the
/// prior's quadratic at the centre (`prior_quadratic`): θ is normal with precision
/// H = AC⁻¹A + P₀, and its mean is the centre plus H⁻¹ times the second value,
/// AC⁻¹ĝ + ∇ ln p(θ_r). `c` is C's Cholesky factor ([`noise_covariance`]).
fn normal_given(
    a: &DMatrix<f64>,
    c: &Cholesky<f64, Dyn>,
    g_hat: &DVector<f64>,
    prior_grad: &DVector<f64>,
    prior_precision: &DMatrix<f64>,
) -> (DMatrix<f64>, DVector<f64>) {
    let a_c_inv = c.solve(a).transpose();
    let precision = &a_c_inv * a + prior_precision;
    let rhs = &a_c_inv * g_hat + prior_grad;
    (precision, rhs)
}

/// The Cholesky factor of ĝ's covariance given A, C = A + σ²I; `None` where it is singular.
fn noise_covariance(a: &DMatrix<f64>, noise_variance: f64) -> Option<Cholesky<f64, Dyn>> {
    (a + DMatrix::identity(a.nrows(), a.nrows()) * noise_variance).cholesky()
}

/// The prior's gradient at `centre` and its curvature −∇² ln p from the gradient at unit
/// moves (exact for the GLMs' normal priors).
fn prior_quadratic(model: &dyn Model, centre: &[f64]) -> (DVector<f64>, DMatrix<f64>) {
    let d = centre.len();
    let mut base = vec![0.0; d];
    model.grad_log_prior(centre, &mut base);
    let mut curvature = DMatrix::zeros(d, d);
    let mut moved = vec![0.0; d];
    for j in 0..d {
        let mut t = centre.to_vec();
        t[j] += 1.0;
        model.grad_log_prior(&t, &mut moved);
        for i in 0..d {
            curvature[(i, j)] = base[i] - moved[i];
        }
    }
    (
        DVector::from_vec(base),
        (&curvature + curvature.transpose()) * 0.5,
    )
}

/// Â with its eigenvalues raised to at least `floor`: the nearest positive definite matrix
/// in Frobenius norm with that floor (noise can make Â indefinite).
pub fn positive_definite(a: &DMatrix<f64>, floor: f64) -> DMatrix<f64> {
    let eig = nalgebra::SymmetricEigen::new(a.clone());
    let values = eig.eigenvalues.map(|v| v.max(floor));
    &eig.eigenvectors * DMatrix::from_diagonal(&values) * eig.eigenvectors.transpose()
}

/// The smallest eigenvalue a noisy Â is given: the noise sd (a direction whose curvature is
/// below it is not measured), and never zero.
fn floor_of(release: &Release) -> f64 {
    release.curvature_noise_variance.sqrt().max(1e-12)
}

/// The noise-aware posterior p(θ, A | ĝ, Â) of the module's comment, sampled on x = (z, L)
/// with θ = θ_r + m(A) + R⁻ᵀz: given A the posterior of θ is normal (the summary's score is
/// linear in θ and the GLMs' priors are normal), with precision H = AC⁻¹A + P₀ = RRᵀ and
/// mean θ_r + m(A), m = H⁻¹(AC⁻¹ĝ + P₀b), b = μ₀ − θ_r for the prior N(μ₀, P₀⁻¹). In (z, L)
/// the density factors exactly into N(z; 0, I) and A's marginal posterior, in which θ is
/// integrated out: ĝ | A ~ N(Ab, C + AP₀⁻¹A). The non-centred form (Papaspiliopoulos,
/// Roberts & Sköld 2007) has no funnel: where the noise hides A, θ's scale changes with A,
/// and a sampler moving θ itself then needs a step size for every scale at once. A logistic
/// bend (`sigmoid.rs`) multiplies the density by exp β(θ, A): the factoring is then close,
/// not exact, and the same coordinates serve (on (θ, L) the bent posterior took 30 times as
/// long and 3 of 100 d = 5 posteriors did not converge; here all of 800 did).
pub struct QuadraticPosterior {
    release: Release,
    g_hat: DVector<f64>,
    a_hat: DMatrix<f64>,
    /// The prior's gradient at the centre, its precision P₀ and covariance V = P₀⁻¹.
    prior_grad: DVector<f64>,
    prior_precision: DMatrix<f64>,
    prior_covariance: DMatrix<f64>,
    /// b = μ₀ − θ_r.
    prior_offset: DVector<f64>,
    /// The logistic score's bend (`sigmoid.rs`), if the summaries are a logistic GLM's.
    bend: Option<Bend>,
}

impl QuadraticPosterior {
    pub fn new(model: Arc<dyn Model>, release: Release, bend: Option<Bend>) -> Self {
        assert_eq!(model.dim(), release.dim(), "summary dimension");
        assert!(
            [release.noise_variance, release.curvature_noise_variance]
                .iter()
                .all(|v| *v > 0.0 && v.is_finite()),
            "a released summary carries positive noise"
        );
        let a_hat = release.a_matrix();
        let (prior_grad, prior_precision) = prior_quadratic(model.as_ref(), &release.centre);
        let chol = prior_precision
            .clone()
            .cholesky()
            .expect("the GLMs' priors are proper normals");
        QuadraticPosterior {
            prior_offset: chol.solve(&prior_grad),
            prior_covariance: chol.inverse(),
            prior_grad,
            prior_precision,
            g_hat: DVector::from_column_slice(&release.g),
            release,
            a_hat,
            bend,
        }
    }

    fn d(&self) -> usize {
        self.release.dim()
    }

    /// Given A and C's Cholesky factor `c`: θ's conditional mean less the centre, m(A), and
    /// the Cholesky factor R of its precision H.
    fn conditional(
        &self,
        a: &DMatrix<f64>,
        c: &Cholesky<f64, Dyn>,
    ) -> Option<(DVector<f64>, DMatrix<f64>)> {
        let (h, rhs) = normal_given(a, c, &self.g_hat, &self.prior_grad, &self.prior_precision);
        let chol = h.cholesky()?;
        Some((chol.solve(&rhs), chol.l()))
    }

    /// `point` with its first d coordinates (z or θ) mapped by `f` given θ's conditional
    /// mean less the centre and precision factor under the A its other coordinates hold.
    fn map_theta(
        &self,
        point: &[f64],
        f: impl Fn(&DVector<f64>, &DMatrix<f64>, &[f64]) -> Vec<f64>,
    ) -> Vec<f64> {
        let d = self.d();
        let (head, coords) = point.split_at(d);
        let l = factor::read(coords, d);
        // S ⪰ C and H ⪰ P₀: both positive definite wherever the density is finite.
        let a = &l * l.transpose();
        let (m, r) = noise_covariance(&a, self.release.noise_variance)
            .and_then(|c| self.conditional(&a, &c))
            .expect("θ's conditional is normal given a positive definite A");
        let mut mapped = f(&m, &r, head);
        mapped.extend_from_slice(coords);
        mapped
    }

    /// A point to start from (as reported): θ the [`Approximation`]'s mode, L the Cholesky
    /// factor of Â made positive definite.
    pub fn initial(&self, model: &dyn Model) -> Vec<f64> {
        let mut x = Approximation::of(model, &self.release).mode;
        let a = positive_definite(&self.a_hat, floor_of(&self.release));
        factor::push(&mut x, &a.cholesky().expect("positive definite").l());
        x
    }
}

impl LogDensity for QuadraticPosterior {
    fn dim(&self) -> usize {
        let d = self.d();
        d + d * (d + 1) / 2
    }

    fn log_density(&self, x: &[f64], grad: &mut [f64]) -> f64 {
        let d = self.d();
        let s2 = self.release.noise_variance;
        let s2a = self.release.curvature_noise_variance;
        let (z, coords) = x.split_at(d);
        let l = factor::read(coords, d);
        let a = &l * l.transpose();
        let v = &self.prior_covariance;
        // ĝ | A ~ N(Ab, S), S = A + σ²I + AVA.
        let s = &a + DMatrix::identity(d, d) * s2 + &a * v * &a;
        let r = &self.g_hat - &a * &self.prior_offset;
        let Some(chol) = s.cholesky() else {
            return f64::NEG_INFINITY;
        };
        let u = chol.solve(&r);
        let s_inv = chol.inverse();
        let half_log_det: f64 = chol.l().diagonal().iter().map(|v| v.ln()).sum();
        let mut value =
            -0.5 * r.dot(&u) - half_log_det - 0.5 * z.iter().map(|z| z * z).sum::<f64>();
        // dℓ = tr(G dA) with dS = dA + dA·VA + AV·dA and dr = −dA·b.
        let uu = &u * u.transpose();
        let vasi = v * &a * &s_inv;
        let vauu = v * &a * &uu;
        let g = &self.prior_offset * u.transpose() + (&uu + &vauu + vauu.transpose()) * 0.5
            - (&s_inv + &vasi + vasi.transpose()) * 0.5;
        let mut gbar = (&g + g.transpose()) * 0.5;
        let mut grad_z: Vec<f64> = z.iter().map(|z| -z).collect();
        if let Some(bend) = &self.bend {
            let z = DVector::from_column_slice(z);
            let Some(added) = noise_covariance(&a, s2).and_then(|c| {
                let (m, r) = self.conditional(&a, &c)?;
                bend.log_factor(&a, &c, &self.g_hat, (&m, &r), &z)
            }) else {
                return f64::NEG_INFINITY;
            };
            value += added.value;
            gbar += added.grad_a;
            for (g, b) in grad_z.iter_mut().zip(added.grad_z.iter()) {
                *g += b;
            }
        }
        // Â's measurement of A, entry by entry over the upper triangle.
        for i in 0..d {
            for j in i..d {
                let e = self.a_hat[(i, j)] - a[(i, j)];
                value -= e * e / (2.0 * s2a);
                let w = if i == j { 1.0 } else { 0.5 };
                gbar[(i, j)] += w * e / s2a;
                if i != j {
                    gbar[(j, i)] += w * e / s2a;
                }
            }
        }
        value += factor::log_jacobian(coords, d, MEANS_PRIOR);
        if !value.is_finite() {
            return f64::NEG_INFINITY;
        }
        grad[..d].copy_from_slice(&grad_z);
        factor::gradient(&gbar, &l, MEANS_PRIOR, &mut grad[d..]);
        value
    }

    fn reported(&self, x: &[f64]) -> Vec<f64> {
        self.map_theta(x, |m, r, z| {
            let spread = r
                .transpose()
                .solve_upper_triangular(&DVector::from_column_slice(z))
                .expect("a Cholesky factor is invertible");
            (&spread + m)
                .iter()
                .zip(&self.release.centre)
                .map(|(s, c)| s + c)
                .collect()
        })
    }

    fn sampler_point(&self, point: &[f64]) -> Vec<f64> {
        self.map_theta(point, |m, r, theta| {
            let delta =
                DVector::from_fn(theta.len(), |i, _| theta[i] - self.release.centre[i] - m[i]);
            (r.transpose() * delta).iter().copied().collect()
        })
    }
}

/// The noise-aware posterior of a quadratic summary, with where its chains start.
pub struct NoiseAware {
    pub target: Box<dyn LogDensity + Send>,
    /// A point to start from (as the target reports its points): θ at the
    /// [`Approximation`]'s mode, A's coordinates where Â is.
    pub initial: Vec<f64>,
    model: Arc<dyn Model>,
    tilted: bool,
}

impl NoiseAware {
    /// A chain's start: [`NoiseAware::initial`] with θ moved by `offset`. Where the score is
    /// exponential in θ (the tilted model), a start far out along a direction the noise
    /// leaves open sits on the plateau where every rate is ~0 or against the wall where they
    /// explode, so the move is held within one unit of any row's linear predictor (without,
    /// 3 of 6 poisson GLMs at 2 000 rows and ε = 1 did not converge).
    pub fn start(&self, offset: &[f64]) -> Vec<f64> {
        let d = offset.len();
        let reach = match quadratic(self.model.as_ref()) {
            Some(summaries) if self.tilted => summaries.reach(offset).max(1.0),
            _ => 1.0,
        };
        let mut x = self.initial.clone();
        for (x, o) in x[..d].iter_mut().zip(offset) {
            *x += o / reach;
        }
        x
    }
}

/// The noise-aware posterior of a quadratic summary of `rows` rows in all: the tilted
/// model of `tilted.rs` where the summaries' score is exponential in θ (the poisson
/// family), else [`QuadraticPosterior`], bent where the score is a sigmoid's.
pub fn noise_aware(model: &Arc<dyn Model>, release: Release, rows: u64) -> NoiseAware {
    let summaries = quadratic(model.as_ref());
    let tilted = summaries.is_some_and(|q| q.tilted());
    let (target, initial): (Box<dyn LogDensity + Send>, _) = if tilted {
        let posterior = TiltedPosterior::new(Arc::clone(model), release, rows);
        let initial = posterior.initial();
        (Box::new(posterior), initial)
    } else {
        let bend = summaries.and_then(|q| bend_of(q, &release, rows));
        let posterior = QuadraticPosterior::new(Arc::clone(model), release, bend);
        let initial = posterior.initial(model.as_ref());
        (Box::new(posterior), initial)
    };
    NoiseAware {
        target,
        initial,
        model: Arc::clone(model),
        tilted,
    }
}

/// The logistic family's bend (`sigmoid.rs`) of `release` over `rows` rows, under the
/// covariates' moments its curvature Â (made positive definite) weighs them by
/// (`covariates.rs`); `None` for a family whose score is not a sigmoid's.
fn bend_of(q: &dyn QuadraticSummaries, release: &Release, rows: u64) -> Option<Bend> {
    let temperature = q.sigmoid()?;
    let a = positive_definite(&release.a_matrix(), floor_of(release));
    let covariates =
        CovariateModel::as_released(&a, &q.design_box(), q.intercept(), &release.centre);
    Some(Bend::new(temperature, rows, covariates, &release.centre))
}

/// The naive plug-in posterior, for comparison only: ĝ and Â taken as exact, so
/// ln p(θ | ĝ, Â) = ĝᵀΔ − ½ΔᵀÂΔ + ln p(θ) with Â made positive definite. It ignores the
/// noise and is over-confident; tests show it under-covers.
pub struct PlugInPosterior {
    model: Arc<dyn Model>,
    centre: DVector<f64>,
    g: DVector<f64>,
    a: DMatrix<f64>,
}

impl PlugInPosterior {
    pub fn new(model: Arc<dyn Model>, release: &Release) -> Self {
        let d = release.dim();
        PlugInPosterior {
            model,
            centre: DVector::from_column_slice(&release.centre),
            g: DVector::from_column_slice(&release.g),
            a: positive_definite(&release.a_matrix(), floor_of(release)),
        }
        .checked(d)
    }

    fn checked(self, d: usize) -> Self {
        assert_eq!(self.model.dim(), d, "summary dimension");
        self
    }
}

impl LogDensity for PlugInPosterior {
    fn dim(&self) -> usize {
        self.centre.len()
    }

    fn log_density(&self, x: &[f64], grad: &mut [f64]) -> f64 {
        let delta = DVector::from_column_slice(x) - &self.centre;
        let a_delta = &self.a * &delta;
        self.model.grad_log_prior(x, grad);
        for i in 0..x.len() {
            grad[i] += self.g[i] - a_delta[i];
        }
        self.g.dot(&delta) - 0.5 * delta.dot(&a_delta) + self.model.log_prior(x)
    }
}

#[cfg(test)]
mod tests;
