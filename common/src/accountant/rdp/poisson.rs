//! RDP of the Poisson-subsampled Gaussian mechanism, add/remove neighbours: Mironov, Talwar,
//! Zhang 2019, "Rényi Differential Privacy of the Sampled Gaussian Mechanism". ε(α) =
//! ln A_α/(α−1) with A_α = E_{z∼μ₀}[((1−q) + q·μ₁(z)/μ₀(z))^α], μ₀ = N(0, s²), μ₁ = N(1, s²);
//! integer α by the binomial expansion of the power, fractional α by the two-sided series split
//! at z₀ (their Sec. 3.3), both in log space as in dp_accounting.
use super::{gaussian_rdp, ln_binomial, log_add};
use crate::accountant::special::erfcx;

/// Terms of the fractional-order series before it is declared divergent (dp_accounting's
/// `_MAX_STEPS_LOG_A_FRAC`); the order is then left out (ε = +∞ there).
const MAX_FRACTIONAL_TERMS: u32 = 1000;

/// ε(α) for sampling rate q ∈ [0, 1] and multiplier s > 0.
pub(super) fn rdp(q: f64, s: f64, order: f64) -> f64 {
    if q == 0.0 {
        0.0
    } else if q == 1.0 {
        gaussian_rdp(s, order)
    } else if order.fract() == 0.0 {
        ln_a_integer(q, s, order) / (order - 1.0)
    } else {
        ln_a_fractional(q, s, order) / (order - 1.0)
    }
}

/// ln A_α = ln Σ_{i=0}^{α} C(α,i) q^i (1−q)^{α−i} e^{(i²−i)/(2s²)} for integer α, 0 < q < 1.
fn ln_a_integer(q: f64, s: f64, order: f64) -> f64 {
    let (ln_q, ln_1mq) = (q.ln(), (-q).ln_1p());
    let mut ln_a = f64::NEG_INFINITY;
    let mut i = 0.0;
    while i <= order {
        let coef = ln_binomial(order, i) + i * ln_q + (order - i) * ln_1mq;
        ln_a = log_add(ln_a, coef + (i * i - i) / (2.0 * s * s));
        i += 1.0;
    }
    ln_a
}

/// ln A_α for fractional α, 0 < q < 1: A_α = A₀ + A₁, the integrals below and above
/// z₀ = s² ln(1/q − 1) + ½, each a binomial series in i with Gaussian tail factors. Like
/// dp_accounting 0.6.0 the terms are added in absolute value (|C(α, i)|), an upper bound on
/// the alternating series; it stops once both term sequences decrease and lie 30 nats below
/// the total.
fn ln_a_fractional(q: f64, s: f64, order: f64) -> f64 {
    let (ln_q, ln_1mq) = (q.ln(), (-q).ln_1p());
    let z0 = s * s * (1.0 / q - 1.0).ln() + 0.5;
    let scale = std::f64::consts::SQRT_2 * s;
    let (mut ln_a0, mut ln_a1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let (mut last0, mut last1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for i in 0..MAX_FRACTIONAL_TERMS {
        let i = f64::from(i);
        let j = order - i;
        let coef = ln_binomial(order, i);
        let t0 = coef + i * ln_q + j * ln_1mq;
        let t1 = coef + j * ln_q + i * ln_1mq;
        let e0 = 0.5f64.ln() + ln_erfc((i - z0) / scale);
        let e1 = 0.5f64.ln() + ln_erfc((z0 - j) / scale);
        let s0 = t0 + (i * i - i) / (2.0 * s * s) + e0;
        let s1 = t1 + (j * j - j) / (2.0 * s * s) + e1;
        ln_a0 = log_add(ln_a0, s0);
        ln_a1 = log_add(ln_a1, s1);
        let total = log_add(ln_a0, ln_a1);
        if s0 < last0 && s1 < last1 && s0.max(s1) < total - 30.0 {
            return total;
        }
        (last0, last1) = (s0, s1);
    }
    f64::INFINITY
}

/// ln erfc(x), accurate far into the tail where erfc underflows.
fn ln_erfc(x: f64) -> f64 {
    if x >= 0.0 {
        erfcx(x).ln() - x * x
    } else {
        libm::erfc(x).ln()
    }
}
