//! Proposals (random walk, one-component updates, guided walk) and their warm-up adaptation.
//!
//! The proposal's scale is adapted during warm-up from acceptance decisions only. Those
//! decisions are post-processing of DP releases, so adapting costs no privacy beyond the
//! warm-up releases themselves (DESIGN §3 "Proposals"); the scale is frozen afterwards, so
//! the chain after warm-up is a plain Markov chain with the right target.
use rand::{Rng, RngExt};
use rand_distr::{Distribution, StandardNormal};

/// Which proposal a chain draws θ′ with (`--proposal rw|ocu|gwmh`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProposalKind {
    /// Isotropic Gaussian random walk: every coordinate moves.
    #[default]
    Rw,
    /// One-component updates (Räisä 2020, Sec. 3.1, after Yıldırım & Ermiş 2019): one
    /// coordinate, chosen uniformly, moves by N(0, scale²). ‖θ′ − θ‖ is one coordinate's step,
    /// so the clip bound and the noise shrink, and a party reads only the columns that
    /// coordinate affects.
    Ocu,
    /// The guided walk (GWMH; Räisä 2020, Sec. 3.1, after Yıldırım & Ermiş 2019): one
    /// coordinate j, chosen uniformly, moves by dⱼ·scale·|z| in its own direction dⱼ ∈ {±1},
    /// kept after an accept and reversed after a reject.
    Gwmh,
}

impl ProposalKind {
    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            ProposalKind::Rw => "rw",
            ProposalKind::Ocu => "ocu",
            ProposalKind::Gwmh => "gwmh",
        }
    }

    /// The acceptance rate the scale adapts to unless told otherwise: 0.25 for the walk in
    /// several dimensions, 0.44 for a one-dimensional update (Roberts & Rosenthal 2001).
    pub fn default_target_accept(self) -> f64 {
        match self {
            ProposalKind::Rw => 0.25,
            ProposalKind::Ocu | ProposalKind::Gwmh => 0.44,
        }
    }

    /// What it is, with its source, for output headers.
    pub fn describe(self) -> &'static str {
        match self {
            ProposalKind::Rw => "rw: Gaussian random walk",
            ProposalKind::Ocu => {
                "ocu: one-component updates (Räisä 2020, Sec. 3.1; Yıldırım & Ermiş 2019)"
            }
            ProposalKind::Gwmh => {
                "gwmh: guided walk, a direction per component, reversed after a reject (Räisä 2020, Sec. 3.1; Yıldırım & Ermiş 2019)"
            }
        }
    }
}

impl std::str::FromStr for ProposalKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [ProposalKind::Rw, ProposalKind::Ocu, ProposalKind::Gwmh]
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown proposal {s:?}: expected rw, ocu or gwmh"))
    }
}

/// A proposal with its state: the scale and, for the guided walk, each component's
/// direction and the component of the pending proposal.
///
/// Each returns ln q(θ|θ′) − ln q(θ′|θ) for the acceptance test. It is 0 for all three:
/// the walk and OCU are symmetric; the guided walk is a Metropolis–Hastings step on (θ, d)
/// with target π(θ)·Uniform(d), whose proposal (θ, d) ↦ (θ + dⱼ·s·|z|·eⱼ, d with dⱼ
/// reversed) is its own inverse for the same j and |z|, whose density is the same both
/// ways, followed by reversing dⱼ. Both steps keep π(θ)·Uniform(d), so the θ-chain targets
/// π: after an accept dⱼ is kept, after a reject it is reversed (Gustafson 1998's guided
/// walk, one component at a time).
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    kind: ProposalKind,
    pub scale: f64,
    /// The walk's shape: a lower-triangular L (row-major), so that θ′ = θ + scale·Lz with
    /// z ~ N(0, I), still symmetric; `None` for the isotropic walk.
    shape: Option<Vec<f64>>,
    /// Scratch for z.
    z: Vec<f64>,
    /// dⱼ ∈ {−1, +1} (the guided walk; all +1 at the start).
    directions: Vec<f64>,
    /// The guided walk's component in the pending proposal.
    pending: Option<usize>,
}

impl Proposal {
    pub fn new(kind: ProposalKind, scale: f64, dim: usize) -> Self {
        Proposal {
            kind,
            scale,
            shape: None,
            z: vec![0.0; dim],
            directions: vec![1.0; dim],
            pending: None,
        }
    }

    /// The random walk shaped by `covariance`, θ′ ~ N(θ, scale²·Σ): one scale fits every
    /// direction of a posterior whose covariance is about Σ. Refused for the one-component
    /// proposals, and for a Σ that is not positive definite.
    pub fn shaped(mut self, covariance: &[Vec<f64>]) -> Result<Self, String> {
        let d = self.z.len();
        if self.kind != ProposalKind::Rw {
            return Err(format!("the {} proposal takes no shape", self.kind.name()));
        }
        if covariance.len() != d || covariance.iter().any(|r| r.len() != d) {
            return Err(format!("a {d}-dimensional walk needs a {d}×{d} covariance"));
        }
        let root = nalgebra::DMatrix::from_fn(d, d, |i, j| covariance[i][j])
            .cholesky()
            .filter(|c| c.l().iter().all(|v| v.is_finite()))
            .ok_or_else(|| {
                format!("the walk's shape {covariance:?} is not a positive definite covariance")
            })?
            .l();
        self.shape = Some(root.transpose().iter().copied().collect());
        Ok(self)
    }

    pub fn kind(&self) -> ProposalKind {
        self.kind
    }

    /// Writes θ′ into `out` and returns ln q(θ|θ′) − ln q(θ′|θ) (0 for each kind).
    pub fn propose<R: Rng + ?Sized>(&mut self, theta: &[f64], out: &mut [f64], rng: &mut R) -> f64 {
        out.copy_from_slice(theta);
        match self.kind {
            ProposalKind::Rw => match &self.shape {
                None => {
                    for o in out.iter_mut() {
                        let z: f64 = StandardNormal.sample(rng);
                        *o += self.scale * z;
                    }
                }
                Some(root) => {
                    let d = self.z.len();
                    for z in self.z.iter_mut() {
                        *z = StandardNormal.sample(rng);
                    }
                    for (i, o) in out.iter_mut().enumerate() {
                        let row = &root[i * d..i * d + i + 1];
                        *o += self.scale * row.iter().zip(&self.z).map(|(l, z)| l * z).sum::<f64>();
                    }
                }
            },
            ProposalKind::Ocu => {
                let j = rng.random_range(0..theta.len());
                let z: f64 = StandardNormal.sample(rng);
                out[j] += self.scale * z;
            }
            ProposalKind::Gwmh => {
                let j = rng.random_range(0..theta.len());
                let z: f64 = StandardNormal.sample(rng);
                out[j] += self.directions[j] * self.scale * z.abs();
                self.pending = Some(j);
            }
        }
        0.0
    }

    /// Records the pending proposal's outcome: the guided walk reverses the moved
    /// component's direction after a reject.
    pub fn decided(&mut self, accepted: bool) {
        if let Some(j) = self.pending.take()
            && !accepted
        {
            self.directions[j] = -self.directions[j];
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
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// The shaped walk's moves have covariance scale²·Σ: over 40 000 draws each entry within
    /// 5 standard errors (the sd of a product of two normals' sample mean is at most
    /// √((ΣᵢᵢΣⱼⱼ + Σᵢⱼ²)/n)); the kinds that move one coordinate and a Σ that is not
    /// positive definite are refused.
    #[test]
    fn the_shaped_walk_moves_with_its_covariance() {
        let sigma = vec![
            vec![4.0, 1.8, 0.0],
            vec![1.8, 1.0, -0.2],
            vec![0.0, -0.2, 0.25],
        ];
        let mut walk = Proposal::new(ProposalKind::Rw, 0.5, 3)
            .shaped(&sigma)
            .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (theta, mut out, n) = ([1.0, 2.0, 3.0], [0.0; 3], 40_000);
        let mut sum = [[0.0; 3]; 3];
        for _ in 0..n {
            assert_eq!(walk.propose(&theta, &mut out, &mut rng), 0.0);
            for i in 0..3 {
                for j in 0..3 {
                    sum[i][j] += (out[i] - theta[i]) * (out[j] - theta[j]) / 0.25;
                }
            }
        }
        for i in 0..3 {
            for j in 0..3 {
                let se = ((sigma[i][i] * sigma[j][j] + sigma[i][j].powi(2)) / f64::from(n)).sqrt();
                let got = sum[i][j] / f64::from(n);
                assert!((got - sigma[i][j]).abs() < 5.0 * se, "({i}, {j}): {got}");
            }
        }
        assert!(
            Proposal::new(ProposalKind::Ocu, 0.5, 3)
                .shaped(&sigma)
                .is_err()
        );
        let flat = vec![
            vec![1.0, 1.0, 0.0],
            vec![1.0, 1.0, 0.0],
            vec![0.0, 0.0, 1.0],
        ];
        assert!(
            Proposal::new(ProposalKind::Rw, 0.5, 3)
                .shaped(&flat)
                .is_err()
        );
    }

    /// OCU and the guided walk move exactly one coordinate, each about equally often; the
    /// guided walk only in its component's direction, which a reject reverses and an accept
    /// keeps; the walk moves all of them. Every kind reports a proposal ratio of 0.
    #[test]
    fn one_component_proposals_move_one_coordinate_in_its_direction() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let theta = [1.0, -2.0, 0.5];
        let mut out = [0.0; 3];
        let mut walk = Proposal::new(ProposalKind::Rw, 0.1, 3);
        assert_eq!(walk.propose(&theta, &mut out, &mut rng), 0.0);
        assert!(out.iter().zip(&theta).all(|(o, t)| o != t));
        for kind in [ProposalKind::Ocu, ProposalKind::Gwmh] {
            let mut p = Proposal::new(kind, 0.1, 3);
            let mut moved = [0usize; 3];
            for _ in 0..3000 {
                assert_eq!(p.propose(&theta, &mut out, &mut rng), 0.0);
                let changed: Vec<usize> = (0..3).filter(|&j| out[j] != theta[j]).collect();
                assert_eq!(changed.len(), 1, "{kind:?}: {out:?}");
                let j = changed[0];
                moved[j] += 1;
                if kind == ProposalKind::Gwmh {
                    let before = p.directions[j];
                    assert_eq!((out[j] - theta[j]).signum(), before);
                    let accepted = moved[j] % 3 == 0;
                    p.decided(accepted);
                    let expect = if accepted { before } else { -before };
                    assert_eq!(p.directions[j], expect);
                }
            }
            // Uniform choice: each within 5 binomial sds of 1000.
            assert!(
                moved
                    .iter()
                    .all(|&m| (m as f64 - 1000.0).abs() < 5.0 * 25.8),
                "{moved:?}"
            );
        }
    }

    #[test]
    fn proposal_kinds_parse_by_their_names() {
        for kind in [ProposalKind::Rw, ProposalKind::Ocu, ProposalKind::Gwmh] {
            assert_eq!(kind.name().parse::<ProposalKind>(), Ok(kind));
        }
        assert!(
            "walk"
                .parse::<ProposalKind>()
                .unwrap_err()
                .contains("rw, ocu or gwmh")
        );
    }

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
