//! The privacy-loss curves of the Gaussian mechanism with subsampling, and their pessimistic
//! Connect-the-Dots discretisation (Doroshenko et al. 2022, Alg. 1).
//!
//! Units: sensitivity 1 under the chosen neighbour relation, noise N(0, s²). One direction of
//! a dominating pair is an upper distribution P (the loss is sampled under P) and a lower Q:
//!
//!   P = (1−q)·N(0, s²) + q·N(−a, s²),   Q = (1−q)·N(0, s²) + q·N(b, s²),
//!
//! with (a, b) = (1, 0) for "remove" (the row is in the data set under P), (0, 1) for "add",
//! and (½, ½) for "substitute" (the row is −½ under P and +½ under Q, 1 apart). The loss
//! L(x) = ln P(x)/Q(x) = ln(1−q + q·e^{(−ax−a²/2)/s²}) − ln(1−q + q·e^{(bx−b²/2)/s²}) is
//! non-increasing in x, so {L ≥ ε} = {x ≤ x*(ε)} and the hockey-stick divergence is
//! δ(ε) = P(X ≤ x*) − e^ε·Q(X ≤ x*) (as dp_accounting's `AdditiveNoisePrivacyLoss`).
//!
//! A batch drawn without replacement under substitution has no such pair; its dominating pair
//! is the symmetrised one of [`SymmetrisedSubsample`], known only through its privacy
//! profile. Both kinds are discretised from their profile alone ([`Profile`]).
use super::super::solve::boundary;
use super::super::special::{c_erfc, ln_erfc};

/// Which of the neighbouring data sets holds the differing row (see the module notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
    Remove,
    Add,
    Substitute,
}

/// One direction of the dominating pair of a Poisson-subsampled Gaussian (q = 1: no sampling).
#[derive(Clone, Copy, Debug)]
pub(super) struct SubsampledGaussian {
    s: f64,
    q: f64,
    direction: Direction,
    /// ln q and ln(1 − q), needed at every ε of a discretisation.
    ln_q: f64,
    ln_keep: f64,
}

/// What Connect-the-Dots needs of a dominating pair: its hockey-stick divergence at every ε
/// and the range of losses that carries all but the truncated noise mass.
pub(super) trait Profile {
    /// δ(ε) = H_{e^ε}(P ‖ Q) for any real ε.
    fn delta(&self, epsilon: f64) -> f64;
    /// [lowest, highest] loss kept under the log mass truncation bound.
    fn loss_range(&self, log_mass_truncation_bound: f64) -> (f64, f64);
}

/// The dominating pair of a Gaussian release on a batch of b rows drawn without replacement
/// from n, under substitution (rate γ = b/n, base pair N(1, s²) against N(0, s²)).
///
/// Dong, Roth, Su 2022 (Gaussian DP, Thm 4.2): if M is f-DP then M on a batch sampled
/// without replacement is C_γ(f)-DP with C_γ(f) = min{f_γ, f_γ⁻¹}**, f_γ = γf + (1−γ)Id.
/// f_γ is the trade-off of (N(0,s²), (1−γ)N(0,s²) + γN(1,s²)), the Poisson "add" pair, and
/// f_γ⁻¹ that of the "remove" pair, so the profile of C_γ(f) is, for ε ≥ 0, the larger of
/// the two Poisson add/remove profiles; C_γ(f) is symmetric, so for ε < 0 it follows from
/// H_α(P‖Q) = 1 − α + α·H_{1/α}(Q‖P): δ(ε) = 1 − e^ε + e^ε·δ(−ε). A single direction of the
/// Poisson pair is not enough: with the other rows of a batch at −½, the differing row's
/// ±½ gives that pair in one order for (D, D') and in the other for (D', D), and on a
/// symmetric relation composition needs one trade-off function that covers both orders.
#[derive(Clone, Copy, Debug)]
pub(super) struct SymmetrisedSubsample {
    remove: SubsampledGaussian,
    add: SubsampledGaussian,
}

impl SymmetrisedSubsample {
    pub fn new(s: f64, gamma: f64) -> Self {
        let direction = |direction| SubsampledGaussian::new(s, gamma, direction);
        Self {
            remove: direction(Direction::Remove),
            add: direction(Direction::Add),
        }
    }

    fn upper_half(&self, epsilon: f64) -> f64 {
        self.remove.delta(epsilon).max(self.add.delta(epsilon))
    }
}

impl Profile for SymmetrisedSubsample {
    fn delta(&self, epsilon: f64) -> f64 {
        if epsilon >= 0.0 {
            self.upper_half(epsilon)
        } else {
            // 1 − e^ε + e^ε·δ(−ε), without cancellation for ε near 0.
            (-epsilon.exp_m1() + epsilon.exp() * self.upper_half(-epsilon)).clamp(0.0, 1.0)
        }
    }

    /// Symmetric around 0, out to the larger of the two directions' highest losses.
    fn loss_range(&self, log_mass_truncation_bound: f64) -> (f64, f64) {
        let hi = self
            .remove
            .loss_range(log_mass_truncation_bound)
            .1
            .max(self.add.loss_range(log_mass_truncation_bound).1)
            .max(0.0);
        (-hi, hi)
    }
}

/// ln(e^x + e^y), exact at −∞ arguments.
fn log_add_exp(x: f64, y: f64) -> f64 {
    let (hi, lo) = if x > y { (x, y) } else { (y, x) };
    if lo == f64::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

/// ln Φ(z) for the standard normal CDF, accurate in the far lower tail (via ln erfc).
fn ln_phi(z: f64) -> f64 {
    if z < -1.0 {
        ln_erfc(-z * std::f64::consts::FRAC_1_SQRT_2) - std::f64::consts::LN_2
    } else {
        (-0.5 * c_erfc(z * std::f64::consts::FRAC_1_SQRT_2)).ln_1p()
    }
}

/// Φ(z) for the standard normal CDF, to a few ulp relative (no cancellation below the
/// median; normal floats down to z ≈ −37).
fn phi(z: f64) -> f64 {
    let t = z * std::f64::consts::FRAC_1_SQRT_2;
    if z < 0.0 {
        0.5 * c_erfc(-t)
    } else {
        1.0 - 0.5 * c_erfc(t)
    }
}

/// asinh(e^t) for any real t without overflow.
fn asinh_exp(t: f64) -> f64 {
    if t <= 0.0 {
        libm::asinh(t.exp())
    } else {
        t + (1.0 + (1.0 + (-2.0 * t).exp()).sqrt()).ln()
    }
}

impl SubsampledGaussian {
    pub fn new(s: f64, q: f64, direction: Direction) -> Self {
        Self {
            s,
            q,
            direction,
            ln_q: q.ln(),
            ln_keep: (-q).ln_1p(),
        }
    }

    /// The l with ln(1−q + q·e^l) = loss, or None (l = −∞) when loss ≤ ln(1−q).
    fn unmix(&self, loss: f64) -> Option<f64> {
        let q = self.q;
        if q == 1.0 {
            return Some(loss);
        }
        if loss <= self.ln_keep {
            return None;
        }
        Some(if loss > 0.0 {
            // e^loss − (1−q) = e^loss·(1 − (1−q)e^{−loss}), no overflow for large losses.
            loss - self.ln_q + (-(1.0 - q) * (-loss).exp()).ln_1p()
        } else {
            (loss.exp_m1() / q).ln_1p()
        })
    }

    /// The means −a (of P's sampled component) and b (of Q's).
    fn offsets(&self) -> (f64, f64) {
        match self.direction {
            Direction::Remove => (1.0, 0.0),
            Direction::Add => (0.0, 1.0),
            Direction::Substitute => (0.5, 0.5),
        }
    }

    /// The privacy loss L(x).
    pub fn loss(&self, x: f64) -> f64 {
        let (a, b) = self.offsets();
        let s2 = self.s * self.s;
        log_add_exp(self.ln_keep, self.ln_q + (-a * x - 0.5 * a * a) / s2)
            - log_add_exp(self.ln_keep, self.ln_q + (b * x - 0.5 * b * b) / s2)
    }

    /// The largest x with L(x) ≥ ε (±∞ where L never reaches / always exceeds ε).
    fn inverse_loss(&self, epsilon: f64) -> f64 {
        let s2 = self.s * self.s;
        match self.direction {
            Direction::Remove => self.unmix(epsilon).map_or(f64::INFINITY, |l| -0.5 - s2 * l),
            Direction::Add => self
                .unmix(-epsilon)
                .map_or(f64::NEG_INFINITY, |l| 0.5 + s2 * l),
            Direction::Substitute => {
                // With u = e^{−x/(2s²)}: e^ε = (1−q + q·c·u)/(1−q + q·c/u), c = e^{−1/(8s²)},
                // a quadratic in u whose root is ln u = ε/2 + asinh(α·sinh(ε/2)),
                // α = (1−q)/(q·c) (dp_accounting's `_inverse_privacy_loss_replace`).
                if epsilon == 0.0 {
                    return 0.0;
                }
                let half = 0.5 * epsilon.abs();
                let asinh = if self.q == 1.0 {
                    0.0
                } else {
                    let ln_alpha = 1.0 / (8.0 * s2) + self.ln_keep - self.ln_q;
                    let ln_sinh = half + (-(-2.0 * half).exp()).ln_1p() - std::f64::consts::LN_2;
                    asinh_exp(ln_alpha + ln_sinh)
                };
                -2.0 * s2 * (0.5 * epsilon + epsilon.signum() * asinh)
            }
        }
    }

    /// The hockey-stick divergence δ(ε) = P(X ≤ x*) − e^ε·Q(X ≤ x*), clamped to [0, 1]:
    /// directly where [`Self::scaled_gaussian_delta`] applies, else from the logarithms of the
    /// two CDFs, ln((1−q)Φ(x/s) + qΦ((x − m)/s)) for each sampled component's mean m (a
    /// component at m = 0 is Φ(x/s) itself).
    fn hockey_stick(&self, epsilon: f64) -> f64 {
        if let Some(delta) = self.scaled_gaussian_delta(epsilon) {
            return delta.clamp(0.0, 1.0);
        }
        let (a, b) = self.offsets();
        let x = self.inverse_loss(epsilon);
        let centre = ln_phi(x / self.s);
        let mixture = |m: f64| {
            if m == 0.0 {
                centre
            } else {
                log_add_exp(self.ln_keep + centre, self.ln_q + ln_phi((x - m) / self.s))
            }
        };
        let ln_p = mixture(-a);
        let ln_q = epsilon + mixture(b);
        if ln_p == f64::NEG_INFINITY {
            return 0.0;
        }
        (-ln_p.exp() * (ln_q - ln_p).exp_m1()).clamp(0.0, 1.0)
    }

    /// Remove and add as multiples of the unsampled Gaussian's δ_G(λ) = Φ(1/(2s) − sλ) −
    /// e^λ·Φ(−1/(2s) − sλ), λ the Gaussian loss at x*: with ln(1−q + q·e^l) = ±ε,
    /// e^ε − (1−q) = q·e^l (remove) and 1 − (1−q)·e^ε = q·e^{ε+l} (add), so
    /// δ_remove = q·δ_G(l) and δ_add = q·e^{ε+l}·δ_G(−l); unsampled, every direction is δ_G(ε).
    /// Two normal CDFs and no logarithm per ε (the discretisation's main cost), and no
    /// cancellation against 1 − q. None for sampled substitution, or where a CDF would leave
    /// the normal floats (the log path handles those).
    fn scaled_gaussian_delta(&self, epsilon: f64) -> Option<f64> {
        let (lambda, scale) = match self.direction {
            _ if self.q == 1.0 => (epsilon, 1.0),
            Direction::Substitute => return None,
            Direction::Remove => match self.unmix(epsilon) {
                Some(l) => (l, self.q),
                // x* = +∞: both CDFs are 1.
                None => return Some(-epsilon.exp_m1()),
            },
            Direction::Add => match self.unmix(-epsilon) {
                Some(l) => (-l, self.q * (epsilon + l).exp()),
                // x* = −∞: both CDFs are 0.
                None => return Some(0.0),
            },
        };
        let upper = 0.5 / self.s - self.s * lambda;
        let lower = upper - 1.0 / self.s;
        if lower < -37.0 || lambda.abs() > 700.0 || !scale.is_finite() {
            return None;
        }
        Some(scale * (phi(upper) - lambda.exp() * phi(lower)))
    }

    /// The outcome range [lo, hi] whose complement has at most e^{bound} mass under each
    /// noise component: every component mean ± s·z with Φ(−z) = ½e^{bound} (the truncation
    /// of dp_accounting's `GaussianPrivacyLoss.privacy_loss_tail`).
    fn outcome_range(&self, log_mass_truncation_bound: f64) -> (f64, f64) {
        let target = log_mass_truncation_bound - std::f64::consts::LN_2;
        // ln Φ(−z) decreases in z; bisect to adjacent floats between 0 and 40 (Φ(−40) ≈ 4e-350).
        let z = boundary(0.0, 40.0, |z| ln_phi(-z) > target).1;
        let (a, b) = self.offsets();
        (-a - self.s * z, b + self.s * z)
    }
}

impl Profile for SubsampledGaussian {
    fn delta(&self, epsilon: f64) -> f64 {
        self.hockey_stick(epsilon)
    }

    /// The losses at the ends of the kept outcome range (L is non-increasing in x).
    fn loss_range(&self, log_mass_truncation_bound: f64) -> (f64, f64) {
        let (x_lo, x_hi) = self.outcome_range(log_mass_truncation_bound);
        (self.loss(x_hi), self.loss(x_lo))
    }
}

/// Pessimistic Connect-the-Dots probabilities on the grid points i·Δ, i = 0 … n−1 (shifted),
/// from the hockey-stick values δ_i there (Doroshenko et al. 2022, Alg. 1; dp_accounting's
/// `create_pmf_pessimistic_connect_dots_fixed_gap`). Returns (probabilities, infinity mass).
/// The resulting PLD has δ equal to the mechanism's at every grid point and, by convexity of
/// δ in e^ε, no smaller in between.
pub(super) fn connect_the_dots(interval: f64, mut deltas: Vec<f64>) -> (Vec<f64>, f64) {
    // δ is non-increasing; rounding must not make it rise.
    for i in 1..deltas.len() {
        deltas[i] = deltas[i].min(deltas[i - 1]);
    }
    let n = deltas.len();
    let last = deltas[n - 1];
    if n == 1 {
        return (vec![1.0 - last], last);
    }
    let up = interval.exp_m1();
    let growth = interval.exp();
    let mut probs = Vec::with_capacity(n);
    probs.push(1.0 - deltas[0] + (deltas[1] - deltas[0]) / up);
    for w in deltas.windows(3) {
        probs.push(((w[2] - w[1]) - growth * (w[1] - w[0])) / up);
    }
    probs.push((deltas[n - 1] - deltas[n - 2]) / (-interval).exp_m1());
    for p in &mut probs {
        *p = p.max(0.0);
    }
    (probs, last)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIRECTIONS: [Direction; 3] = [Direction::Remove, Direction::Add, Direction::Substitute];

    #[test]
    fn inverse_loss_inverts_loss() {
        for direction in DIRECTIONS {
            for (s, q) in [(1.0, 1.0), (0.7, 0.01), (2.0, 0.3), (1.0, 0.999)] {
                let m = SubsampledGaussian::new(s, q, direction);
                for x in [-5.0, -1.3, -0.2, 0.0, 0.4, 2.0, 6.0] {
                    let l = m.loss(x);
                    let back = m.inverse_loss(l);
                    assert!(
                        (back - x).abs() < 1e-8 * (1.0 + x.abs()),
                        "{direction:?} s={s} q={q} x={x} L={l} back={back}"
                    );
                }
            }
        }
    }

    #[test]
    fn unsampled_delta_is_the_analytic_gaussian_curve() {
        let g = super::super::super::GaussianComposition::from_mu(0.5 / (1.3 * 1.3)).unwrap();
        for direction in DIRECTIONS {
            let m = SubsampledGaussian::new(1.3, 1.0, direction);
            for eps in [-1.0, 0.0, 0.3, 1.0, 4.0] {
                let (got, want) = (m.delta(eps), g.delta(eps));
                assert!(
                    (got / want - 1.0).abs() < 1e-12,
                    "{direction:?} {eps}: {got} {want}"
                );
            }
        }
    }

    /// The symmetrised batch pair covers both Poisson orders at ε ≥ 0, satisfies the
    /// symmetry δ(ε) = 1 − e^ε + e^ε·δ(−ε), and is the plain Gaussian when the batch is
    /// everything (C₁(f) = f for a symmetric f).
    #[test]
    fn symmetrised_batch_profile_is_symmetric_and_covers_both_orders() {
        for (s, gamma) in [(1.0, 0.01), (0.6, 0.3), (2.0, 0.9)] {
            let pair = SymmetrisedSubsample::new(s, gamma);
            for eps in [0.0, 0.01, 0.5, 2.0, 6.0] {
                let (up, down) = (pair.delta(eps), pair.delta(-eps));
                assert!(up >= pair.remove.delta(eps) && up >= pair.add.delta(eps));
                let mirrored = 1.0 - (-eps).exp() + (-eps).exp() * up;
                assert!((down - mirrored).abs() < 1e-15, "s={s} γ={gamma} ε={eps}");
            }
        }
        let whole = SymmetrisedSubsample::new(1.3, 1.0);
        let gaussian = SubsampledGaussian::new(1.3, 1.0, Direction::Substitute);
        for eps in [-2.0, -0.1, 0.0, 0.7, 3.0] {
            let (got, want) = (whole.delta(eps), gaussian.delta(eps));
            assert!(
                (got - want).abs() <= 1e-14 * want.max(1e-300),
                "{eps}: {got} {want}"
            );
        }
    }

    #[test]
    fn ln_phi_is_accurate_in_both_tails() {
        // Φ(−10) = 7.619853024160526e-24, Φ(1) = 0.8413447460685429 (mpmath).
        assert!((ln_phi(-10.0) - 7.619_853_024_160_526e-24_f64.ln()).abs() < 1e-13);
        assert!((ln_phi(1.0) - 0.841_344_746_068_542_9_f64.ln()).abs() < 1e-15);
    }
}
