//! Amplification by subsampling without replacement, substitute neighbours: Wang, Balle,
//! Kasiviswanathan 2019 (WBK19), "Subsampled Rényi Differential Privacy and Analytical Moments
//! Accountant". For a base mechanism with RDP ε′ and a batch fraction q = b/n, at integer α ≥ 2
//! (their Thm 9 with ε′(∞) = ∞, as quoted in Räisä 2020, Thm 3.3 and 3.5):
//!
//!   ε(α) ≤ 1/(α−1) ln(1 + q²C(α,2) min{4(e^{ε′(2)} − 1), 2e^{ε′(2)}}
//!                       + Σ_{j=3}^{α} q^j C(α,j) · 2e^{(j−1)ε′(j)}).
//!
//! For the Gaussian base, each j ≥ 3 term is replaced by their Thm 27 term
//! 4·√(|Δ^{2⌊j/2⌋}| |Δ^{2⌈j/2⌉}|) when smaller, Δ^k being the k-th forward difference at 0 of
//! l ↦ e^{(l−1)ε′(l)}; as dp_accounting, only up to α = 256 (the differences cost O(α²)).
//! Fractional α interpolates the cumulant (α−1)ε(α) linearly between neighbouring integers
//! (their Cor 10).
use super::{MAX_DENSE_ORDER, gaussian_rdp, ln_binomial, log_add};

/// The Gaussian mechanism with multiplier s on a batch of fraction q drawn without replacement.
pub(super) struct SubsampledGaussian {
    q: f64,
    s: f64,
    /// ln |Δ^{k+1} g|(0) for g(l) = e^{(l−1)ε′(l)}, k = 0..=MAX_DENSE_ORDER+1 (Thm 27).
    ln_forward_differences: Vec<f64>,
}

impl SubsampledGaussian {
    pub(super) fn new(q: f64, s: f64) -> Self {
        let cumulant = |l: f64| (l - 1.0) * gaussian_rdp(s, l);
        Self {
            q,
            s,
            ln_forward_differences: ln_forward_differences(cumulant, MAX_DENSE_ORDER as usize),
        }
    }

    /// ε(α) for α ≥ 1 (α = 1 gives 0).
    pub(super) fn rdp(&self, order: f64) -> f64 {
        if self.q == 1.0 {
            return gaussian_rdp(self.s, order);
        }
        let (lo, hi) = (order.floor(), order.ceil());
        if lo == hi {
            return self.ln_a(lo) / (order - 1.0);
        }
        let t = order - lo;
        ((1.0 - t) * self.ln_a(lo) + t * self.ln_a(hi)) / (order - 1.0)
    }

    /// ln A_α = (α−1)ε(α) at integer α (0 at α = 1).
    fn ln_a(&self, order: f64) -> f64 {
        if order == 1.0 {
            return 0.0;
        }
        let thm27 = (order <= f64::from(MAX_DENSE_ORDER)).then_some(&self.ln_forward_differences);
        ln_a(
            self.q,
            order,
            |l| gaussian_rdp(self.s, l),
            thm27.map(Vec::as_slice),
        )
    }
}

/// ε(α) of one DP Barker iteration (Räisä 2020, Thm 3.3): Thm 9 on the base bound
/// ε′(α) = 5/(2b) + ln(2b/(b−5α))/(2(α−1)) + 2α/(b−5α) of Heikkilä et al. 2019, which holds
/// for integer 2 < α < b/5; +∞ at every other order.
pub(super) fn barker_rdp(q: f64, b: f64, order: f64) -> f64 {
    if order.fract() != 0.0 || order <= 2.0 || 5.0 * order >= b {
        return f64::INFINITY;
    }
    let base = |a: f64| {
        5.0 / (2.0 * b)
            + (2.0 * b / (b - 5.0 * a)).ln() / (2.0 * (a - 1.0))
            + 2.0 * a / (b - 5.0 * a)
    };
    ln_a(q, order, base, None) / (order - 1.0)
}

/// ln of the WBK19 Thm 9 sum at integer α ≥ 2 for base RDP `base` (ε′(j), j ≥ 2), with the
/// Thm 27 term taking over where given and smaller (`thm27` from [`ln_forward_differences`]).
fn ln_a(q: f64, order: f64, base: impl Fn(f64) -> f64, thm27: Option<&[f64]>) -> f64 {
    let ln_q = q.ln();
    let e2 = base(2.0);
    // ln(e^{ε′(2)} − 1) written as ε′(2) + ln(1 − e^{−ε′(2)}).
    let ln_e2_m1 = e2 + (-(-e2).exp()).ln_1p();
    let mut total = 0.0; // ln 1
    let mut j = 2.0;
    while j <= order {
        let term = if j == 2.0 {
            (4.0f64.ln() + ln_e2_m1).min(e2 + 2.0f64.ln())
        } else {
            let thm9 = 2.0f64.ln() + (j - 1.0) * base(j);
            match thm27 {
                Some(d) => {
                    let (lo, hi) = ((j / 2.0).floor(), (j / 2.0).ceil());
                    let lo = d[(2.0 * lo) as usize - 1];
                    let hi = d[(2.0 * hi) as usize - 1];
                    (4.0f64.ln() + 0.5 * (lo + hi)).min(thm9)
                }
                None => thm9,
            }
        };
        total = log_add(total, term + (j * ln_q + ln_binomial(order, j)));
        j += 1.0;
    }
    total
}

/// ln |Δ^{k+1} g|(0), k = 0..n+2, of g(l) = e^{c(l)} on l = 0, 1, …, n+2 with the cumulant
/// c(l) = (l−1)ε′(l) and g(0) = 1:
/// repeated differences of the sequence kept as (ln |·|, sign), as dp_accounting's
/// `_get_forward_diffs` (whose values it reproduces operation for operation).
fn ln_forward_differences(cumulant: impl Fn(f64) -> f64, n: usize) -> Vec<f64> {
    let mut ln_abs = vec![0.0; n + 3];
    let mut positive = vec![true; n + 3];
    for (l, v) in ln_abs.iter_mut().enumerate().skip(1) {
        *v = cumulant(l as f64);
    }
    let mut out = Vec::with_capacity(n + 2);
    for level in 0..n + 2 {
        for j in 0..n + 2 - level {
            if positive[j] == positive[j + 1] {
                let (sign, mag) = ln_sub_sign(ln_abs[j + 1], ln_abs[j]);
                positive[j] = sign == positive[j + 1];
                ln_abs[j] = mag;
            } else {
                ln_abs[j] = log_add(ln_abs[j], ln_abs[j + 1]);
                positive[j] = positive[j + 1];
            }
        }
        out.push(ln_abs[0]);
    }
    out
}

/// (e^x ≥ e^y, ln |e^x − e^y|).
fn ln_sub_sign(x: f64, y: f64) -> (bool, f64) {
    if x > y {
        (true, x + (-(y - x).exp()).ln_1p())
    } else if x < y {
        (false, y + (-(x - y).exp()).ln_1p())
    } else {
        (true, f64::NEG_INFINITY)
    }
}
