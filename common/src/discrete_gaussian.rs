//! Exact discrete Gaussian noise on the integer grid, for releases that must not leak through
//! the low bits of floating-point noise (Mironov 2012). The caller passes the RNG (a party
//! passes its CSPRNG, as [`crate::mechanism`] does); every draw below is exact given uniform
//! bits from it: integer arithmetic only, no floating point on the sampling path.
//!
//! # Algorithms
//!
//! Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy"
//! (arXiv:2004.00010, Sec. 5), written here from the paper, not taken from a library:
//!
//! * [`bernoulli_exp`]: Bernoulli(exp(−γ)) for a rational γ ≥ 0 (their Alg. 1: for γ ≤ 1,
//!   draw A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the first A_k = 0 and answer 1 iff that
//!   k is odd; for γ > 1, ⌊γ⌋ draws of Bernoulli(exp(−1)) and one of Bernoulli(exp(−(γ−⌊γ⌋)))
//!   must all be 1);
//! * [`sample_discrete_laplace`]: the discrete Laplace, P[Y = y] ∝ exp(−|y|/t), for an
//!   integer scale t (their Alg. 2 with s = 1: U uniform on {0,…,t−1} kept with probability
//!   exp(−U/t), V geometric from Bernoulli(exp(−1)) trials, X = U + tV, a random sign, and
//!   −0 rejected);
//! * [`DiscreteGaussian::sample`]: N_Z(0, σ²) by rejection from the discrete Laplace of scale
//!   t = ⌊σ⌋ + 1, keeping a candidate Y with probability exp(−(|Y| − σ²/t)²/(2σ²)) (their
//!   Alg. 3).
//!
//! OpenDP ships the same three samplers, but they draw from OpenDP's own global generator
//! (`fill_bytes`, not a caller's RNG), so fixed-seed tests and the party's own CSPRNG could
//! not drive them, and the crate's default features build a vendored OpenSSL, on top of its
//! own `rand` 0.7, `num`, `dashu` and proc-macro tree. Hence this module.
//!
//! # σ² is a rational; arithmetic is checked
//!
//! σ² is given in grid units² as `num/den` (two `u64`, reduced by their gcd) to
//! [`DiscreteGaussian::new`], or derived from an `f64` σ and an `f64` grid step by
//! [`DiscreteGaussian::from_sigma_and_step`], which converts both floats to rationals exactly
//! and rounds σ²/step² **up** to a multiple of 2^−k (never less noise than asked for).
//! Every acceptance test reduces to γ = u²/b with u = | |Y|·d·t − n | and b = 2·n·d·t² for
//! σ² = n/d; `new` refuses (with [`DiscreteGaussianError::OutOfRange`]) any σ² for which b
//! does not fit in a `u128`, which allows σ up to about 2^31 grid steps when σ² is an
//! integer. u² is formed in 256 bits when u ≥ 2^64. Uniform integers are drawn by masked
//! rejection (never by a modulo). The only candidates not handled exactly are those with
//! |Y|·d·t ≥ 2^128: γ ≥ 2^126 there, so they are rejected, a change to the output law of at
//! most exp(−2^126) in total variation.
//!
//! # Which privacy bound holds
//!
//! Let q map a data set to Z^d (the statistic **after** rounding to the public grid, in grid
//! units; the rounding is part of the sensitivity, Kairouz, Liu & Steinke 2021) and let the
//! release be q(x) + Y, Y_j ~ N_Z(0, σ_j²) independent, with Σ_j (q_j(x) − q_j(x'))²/σ_j² ≤ ε²
//! for every neighbouring pair (so ε = Δ/σ for an L2 sensitivity Δ and a common σ).
//!
//! What CKS 2020 prove (statements as we read them; theorem numbers are left out until they
//! are checked against arXiv:2004.00010):
//! * One dimension: the Rényi divergence between N_Z(μ, σ²) and N_Z(ν, σ²) is at most
//!   α(μ − ν)²/(2σ²) for every order α ≥ 1, with equality when μ − ν is an integer, the same
//!   curve as the continuous Gaussian's; so the release is ½(Δ/σ)²-concentrated DP (zCDP).
//! * d dimensions with independent coordinates (their multivariate theorem): ½ε²-zCDP with
//!   the ε above — the same ρ as the continuous Gaussian mechanism, with **no** extra term.
//! * Approximate DP in one dimension, for an integer Δ: the tight
//!   δ = P[Y > εσ²/Δ − Δ/2] − e^ε·P[Y > εσ²/Δ + Δ/2], Y ~ N_Z(0, σ²) (the discrete
//!   Gaussian's own tails), and an upper bound through continuous-Gaussian tails with floors
//!   and a factor 1 − 1/(1 + √(2πσ²)). Their plots show this δ close to the continuous
//!   Gaussian's; we found no theorem that it is never larger. In d dimensions the privacy
//!   loss is not exactly Gaussian, and their multivariate (ε, δ) statement carries a further
//!   term, exponentially small in the σ_j²; it is not needed while the accountant stays on
//!   zCDP/RDP.
//!
//! Consequences for the accountant (left unchanged here): an RDP or zCDP accountant that uses
//! the Gaussian curve αΔ²/(2σ²) stays valid as it is, coordinate-wise or in L2; that is the
//! unsubsampled curve: a subsampled-Gaussian RDP formula derived for the continuous Gaussian
//! (Mironov, Talwar & Zhang 2019) does not transfer by this argument. A PLD or
//! (ε, δ) accountant built on the continuous Gaussian's privacy-loss distribution is **not**
//! covered by a theorem for the discrete noise; it needs the discrete Gaussian's own PLD (a
//! sum over the integers) or the zCDP bound. Under secure aggregation the sum of several
//! parties' discrete Gaussians is not itself a discrete Gaussian: Kairouz, Liu & Steinke 2021
//! bound that sum with an additional term (τ, exponentially small in the shares' σ²) that
//! the accountant must then carry.
//!
//! # Variance
//!
//! [`discrete_gaussian_variance`] sums Σ k² e^{−k²/2σ²} / Σ e^{−k²/2σ²} to convergence (the
//! Poisson-summation dual of the same series above σ² = 4, where it converges faster). CKS
//! 2020 prove Var ≤ σ² (N_Z(0, σ²) is σ²-sub-Gaussian) and more precisely
//! Var ≤ σ²·(1 − 4π²σ²/(e^{4π²σ²} − 1)) < σ². The dual series gives the gap exactly,
//! σ² − Var = 8π²σ⁴·S₂/(1 + 2S₀) with S₀ = Σ_{m≥1} e^{−2π²σ²m²}, S₂ = Σ_{m≥1} m² e^{−2π²σ²m²},
//! hence, for σ ≥ ½,  0 < σ² − Var ≤ 8π²σ⁴·e^{−2π²σ²}·(1 + 10⁻⁵): at most 2.1·10⁻⁷ grid
//! units² at σ = 1 and below 10⁻³⁰ at σ = 2, so on a grid finer than σ/2 the noise variance
//! is σ² to double precision. Below one grid step it is not (Var ≈ 2e^{−1/(2σ²)} for small σ).
use rand::Rng;

/// Why a σ² was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiscreteGaussianError {
    #[error("σ² has a zero denominator")]
    ZeroDenominator,
    /// σ² = 0 is no noise at all: refused rather than releasing the raw statistic.
    #[error("σ² = 0 adds no noise")]
    ZeroVariance,
    #[error("σ or the grid step is not a positive finite number")]
    NotPositiveFinite,
    /// 2·n·d·t² overflows a u128 (σ above about 2^31 grid steps for an integer σ², less for
    /// a fine denominator).
    #[error("σ² = {num}/{den} is too large for exact 128-bit sampling")]
    OutOfRange { num: u64, den: u64 },
}

/// N_Z(0, σ²) on the integers, σ² = num/den grid units².
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscreteGaussian {
    num: u64,
    den: u64,
    /// Scale of the discrete Laplace proposal, ⌊σ⌋ + 1.
    t: u64,
    /// d·t, so that |Y| − σ²/t = (|Y|·d·t − n)/(d·t).
    dt: u128,
    /// 2·n·d·t², the denominator of the acceptance exponent.
    gamma_den: u128,
}

impl DiscreteGaussian {
    /// σ² = `num`/`den` in grid units², reduced by the gcd. Refuses σ² = 0 and σ² too large
    /// for 128-bit arithmetic (see the module documentation).
    pub fn new(num: u64, den: u64) -> Result<Self, DiscreteGaussianError> {
        if den == 0 {
            return Err(DiscreteGaussianError::ZeroDenominator);
        }
        if num == 0 {
            return Err(DiscreteGaussianError::ZeroVariance);
        }
        let g = gcd(num, den);
        let (n, d) = (num / g, den / g);
        // ⌊√(n/d)⌋ = ⌊√⌊n/d⌋⌋, so t is exact; t ≤ 2^32 + 1.
        let t = (n / d).isqrt() + 1;
        let dt = u128::from(d) * u128::from(t);
        let gamma_den = 2u128
            .checked_mul(u128::from(n))
            .and_then(|x| x.checked_mul(u128::from(d)))
            .and_then(|x| x.checked_mul(u128::from(t)))
            .and_then(|x| x.checked_mul(u128::from(t)))
            .ok_or(DiscreteGaussianError::OutOfRange { num, den })?;
        Ok(Self {
            num: n,
            den: d,
            t,
            dt,
            gamma_den,
        })
    }

    /// σ² = (σ/step)² in grid units², from an `f64` σ and an `f64` public grid step, both
    /// converted to rationals exactly (an `f64` is m·2^e) and the ratio rounded **up** to a
    /// multiple of 2^−k, with k = min(32, 60 − 2·bits(⌊σ/step⌋ + 1)) (at least 0): at most
    /// 2^−32 grid units² above the exact value for σ below 2^14 steps, never below it, so a
    /// privacy bound computed at the requested σ still holds. [`Self::sigma_sq`] returns the
    /// rational actually used.
    pub fn from_sigma_and_step(sigma: f64, step: f64) -> Result<Self, DiscreteGaussianError> {
        let (Some((ms, es)), Some((mt, et))) = (decompose(sigma), decompose(step)) else {
            return Err(DiscreteGaussianError::NotPositiveFinite);
        };
        // Only to choose k: the exact value below does not depend on this float.
        let approx_t = (sigma / step).floor() + 1.0;
        let t_bits = if approx_t >= 2f64.powi(63) {
            64
        } else {
            64 - (approx_t as u64).leading_zeros()
        };
        let k = 60i64.saturating_sub(2 * i64::from(t_bits)).clamp(0, 32);
        // (σ/step)²·2^k = (ms²/mt²)·2^(2(es − et) + k), rounded up.
        let n = u128::from(ms) * u128::from(ms);
        let d = u128::from(mt) * u128::from(mt);
        let shift = 2 * (i64::from(es) - i64::from(et)) + k;
        let too_large = DiscreteGaussianError::OutOfRange {
            num: u64::MAX,
            den: 1u64 << k,
        };
        let scaled = ceil_ratio_pow2(n, d, shift).ok_or(too_large)?;
        let num = u64::try_from(scaled).map_err(|_| too_large)?;
        Self::new(num, 1u64 << k)
    }

    /// σ² actually used, as (numerator, denominator) in lowest terms.
    pub fn sigma_sq(&self) -> (u64, u64) {
        (self.num, self.den)
    }

    /// σ² as an `f64` (rounded; the sampler uses the exact rational).
    pub fn sigma_sq_f64(&self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// Scale t = ⌊σ⌋ + 1 of the discrete Laplace proposal.
    pub fn laplace_scale(&self) -> u64 {
        self.t
    }

    /// Var[N_Z(0, σ²)] (see [`discrete_gaussian_variance`]).
    pub fn variance(&self) -> f64 {
        discrete_gaussian_variance(self.sigma_sq_f64())
    }

    /// One exact draw of N_Z(0, σ²) (CKS 2020, Alg. 3).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> i128 {
        loop {
            let y = sample_discrete_laplace(self.t, rng);
            // γ = (|Y| − σ²/t)²/(2σ²) = (|Y|·d·t − n)²/(2·n·d·t²).
            let Some(ydt) = y.unsigned_abs().checked_mul(self.dt) else {
                // |Y|·d·t ≥ 2^128, so u ≥ 2^127 and γ = u²/b ≥ 2^126: rejected (module doc).
                continue;
            };
            let u = ydt.abs_diff(u128::from(self.num));
            if bernoulli_exp_square_ratio(u, self.gamma_den, rng) {
                return y;
            }
        }
    }
}

/// One exact draw of Bernoulli(exp(−num/den)) (CKS 2020, Alg. 1). Panics if `den` is 0.
pub fn bernoulli_exp<R: Rng + ?Sized>(num: u128, den: u128, rng: &mut R) -> bool {
    assert!(den > 0, "Bernoulli(exp(-num/den)) needs den > 0");
    bernoulli_exp_parts(0, num / den, num % den, den, rng)
}

/// One exact draw of the discrete Laplace, P[Y = y] = tanh(1/(2t))·exp(−|y|/t) on the
/// integers (CKS 2020, Alg. 2 with an integer scale). Panics if `t` is 0.
pub fn sample_discrete_laplace<R: Rng + ?Sized>(t: u64, rng: &mut R) -> i128 {
    assert!(t > 0, "the discrete Laplace needs a scale t >= 1");
    let t = u128::from(t);
    loop {
        let u = uniform_below(t, rng);
        if !bernoulli_exp_fraction(u, t, rng) {
            continue;
        }
        let mut v: u128 = 0;
        while bernoulli_exp_fraction(1, 1, rng) {
            v += 1;
        }
        // X = U + t·V; past i128 only after ~2^94 consecutive successes of probability 1/e.
        let Some(x) = t
            .checked_mul(v)
            .and_then(|tv| tv.checked_add(u))
            .and_then(|x| i128::try_from(x).ok())
        else {
            continue;
        };
        let negative = rng.next_u32() & 1 == 1;
        if negative && x == 0 {
            continue;
        }
        return if negative { -x } else { x };
    }
}

/// A uniform integer on {0, …, m − 1}, by masked rejection (no modulo bias). Panics if `m`
/// is 0.
pub fn uniform_below<R: Rng + ?Sized>(m: u128, rng: &mut R) -> u128 {
    assert!(m > 0, "uniform_below needs m > 0");
    let top = m - 1;
    if top == 0 {
        return 0;
    }
    if let Ok(top) = u64::try_from(top) {
        let mask = u64::MAX >> top.leading_zeros();
        loop {
            let x = rng.next_u64() & mask;
            if x <= top {
                return u128::from(x);
            }
        }
    }
    let mask = u128::MAX >> top.leading_zeros();
    loop {
        let x = ((u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())) & mask;
        if x <= top {
            return x;
        }
    }
}

/// Var[N_Z(0, σ²)] = Σ k² e^{−k²/2σ²} / Σ e^{−k²/2σ²}, summed to convergence: directly for
/// σ² ≤ 4, through its Poisson-summation dual σ²·(1 − 8π²σ²·S₂/(1 + 2S₀)) above (module
/// documentation; both series agree to rounding where they overlap). 0 at σ² = 0, NaN for a
/// negative or NaN σ².
pub fn discrete_gaussian_variance(sigma_sq: f64) -> f64 {
    if sigma_sq.is_nan() || sigma_sq < 0.0 {
        return f64::NAN;
    }
    if sigma_sq == 0.0 {
        return 0.0;
    }
    if sigma_sq <= 4.0 {
        variance_direct(sigma_sq)
    } else {
        variance_dual(sigma_sq)
    }
}

fn variance_direct(sigma_sq: f64) -> f64 {
    let (mut z, mut m2) = (0.0f64, 0.0f64);
    let mut k = 1.0f64;
    loop {
        let w = (-k * k / (2.0 * sigma_sq)).exp();
        z += w;
        m2 += k * k * w;
        // Past the mode of k²e^{−k²/2σ²} the terms fall faster than geometrically.
        if k * k > 2.0 * sigma_sq && k * k * w <= 1e-18 * m2 {
            break;
        }
        k += 1.0;
    }
    2.0 * m2 / (1.0 + 2.0 * z)
}

fn variance_dual(sigma_sq: f64) -> f64 {
    let c = 2.0 * std::f64::consts::PI * std::f64::consts::PI * sigma_sq;
    let (mut s0, mut s2) = (0.0f64, 0.0f64);
    let mut m = 1.0f64;
    loop {
        let w = (-c * m * m).exp();
        s0 += w;
        s2 += m * m * w;
        if w == 0.0 || m * m * w <= 1e-18 * s2 {
            break;
        }
        m += 1.0;
    }
    sigma_sq * (1.0 - 4.0 * c * s2 / (1.0 + 2.0 * s0))
}

/// Bernoulli(exp(−γ)) for γ = u²/b.
fn bernoulli_exp_square_ratio<R: Rng + ?Sized>(u: u128, b: u128, rng: &mut R) -> bool {
    if u <= u128::from(u64::MAX) {
        let uu = u * u;
        // Most candidates have γ < 1: no division then.
        if uu < b {
            return bernoulli_exp_fraction(uu, b, rng);
        }
        bernoulli_exp_parts(0, uu / b, uu % b, b, rng)
    } else {
        let (hi, lo) = mul_wide(u, u);
        let (q_hi, q_lo, r) = div_rem_wide(hi, lo, b);
        bernoulli_exp_parts(q_hi, q_lo, r, b, rng)
    }
}

/// Bernoulli(exp(−(q + r/b))) for a 256-bit integer part q = q_hi·2^128 + q_lo and r < b:
/// q draws of Bernoulli(exp(−1)) and one of Bernoulli(exp(−r/b)), all 1 (CKS 2020, Alg. 1).
fn bernoulli_exp_parts<R: Rng + ?Sized>(
    q_hi: u128,
    q_lo: u128,
    r: u128,
    b: u128,
    rng: &mut R,
) -> bool {
    let (mut hi, mut lo) = (q_hi, q_lo);
    while hi != 0 || lo != 0 {
        if !bernoulli_exp_fraction(1, 1, rng) {
            return false;
        }
        if lo == 0 {
            hi -= 1;
            lo = u128::MAX;
        } else {
            lo -= 1;
        }
    }
    bernoulli_exp_fraction(r, b, rng)
}

/// Bernoulli(exp(−r/b)) for 0 ≤ r ≤ b (von Neumann's series, CKS 2020 Alg. 1 for γ ≤ 1):
/// K is the first k with Bernoulli(γ/k) = 0; P[K > k] = γ^k/k!, so K odd has probability
/// Σ (−γ)^j/j! = exp(−γ).
fn bernoulli_exp_fraction<R: Rng + ?Sized>(r: u128, b: u128, rng: &mut R) -> bool {
    let mut k: u128 = 1;
    while bernoulli_ratio(r, b, k, rng) {
        k += 1;
    }
    k % 2 == 1
}

/// Bernoulli(r/(b·k)) for r ≤ b, k ≥ 1: one uniform draw below b·k, or, when b·k overflows,
/// the product of independent Bernoulli(r/b) and Bernoulli(1/k).
fn bernoulli_ratio<R: Rng + ?Sized>(r: u128, b: u128, k: u128, rng: &mut R) -> bool {
    if r == 0 {
        return false;
    }
    match b.checked_mul(k) {
        Some(bk) => uniform_below(bk, rng) < r,
        None => uniform_below(k, rng) == 0 && uniform_below(b, rng) < r,
    }
}

/// The 256-bit product a·b as (high, low) halves.
fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    const LOW: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & LOW);
    let (b1, b0) = (b >> 64, b & LOW);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    // Three terms below 2^64 each: no overflow.
    let mid = (p00 >> 64) + (p01 & LOW) + (p10 & LOW);
    let lo = (p00 & LOW) | (mid << 64);
    let hi = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (hi, lo)
}

/// (hi·2^128 + lo) divided by d > 0: quotient as (high, low) halves, and remainder. Binary
/// long division; only reached when u ≥ 2^64.
fn div_rem_wide(hi: u128, lo: u128, d: u128) -> (u128, u128, u128) {
    if hi == 0 {
        return (0, lo / d, lo % d);
    }
    let (mut q_hi, mut q_lo, mut rem) = (0u128, 0u128, 0u128);
    for i in (0..256).rev() {
        let bit = if i >= 128 {
            (hi >> (i - 128)) & 1
        } else {
            (lo >> i) & 1
        };
        // rem < d ≤ u128::MAX, so 2·rem + bit < 2^129: keep the carry.
        let carry = rem >> 127;
        rem = (rem << 1) | bit;
        if carry == 1 || rem >= d {
            rem = rem.wrapping_sub(d);
            if i >= 128 {
                q_hi |= 1 << (i - 128);
            } else {
                q_lo |= 1 << i;
            }
        }
    }
    (q_hi, q_lo, rem)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A positive finite f64 as m·2^e exactly.
fn decompose(x: f64) -> Option<(u64, i32)> {
    if !(x.is_finite() && x > 0.0) {
        return None;
    }
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    Some(if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), exponent - 1075)
    })
}

/// ⌈n·2^shift / d⌉ for n, d > 0, or None if it does not fit in a u128.
fn ceil_ratio_pow2(n: u128, d: u128, shift: i64) -> Option<u128> {
    if shift >= 0 {
        // Long division of n·2^shift by d, one bit at a time; r < d < 2^127 never overflows.
        let (mut q, mut r) = (n / d, n % d);
        for _ in 0..shift {
            q = q.checked_mul(2)?;
            r <<= 1;
            if r >= d {
                r -= d;
                q += 1;
            }
        }
        q.checked_add(u128::from(r != 0))
    } else {
        // ⌈⌈n/d⌉/2^s⌉ = ⌈n/(d·2^s)⌉ for positive integers.
        let c = n.div_ceil(d);
        let s = shift.unsigned_abs();
        Some(if s >= 128 {
            u128::from(c > 0)
        } else {
            (c >> s) + u128::from(c & ((1u128 << s) - 1) != 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discrete_wide_arithmetic() {
        assert_eq!(mul_wide(u128::MAX, u128::MAX), (u128::MAX - 1, 1));
        assert_eq!(mul_wide(1 << 64, 1 << 64), (1, 0));
        assert_eq!(mul_wide(3, 5), (0, 15));
        // 2^128 ≡ 1 (mod 3), so 3 divides 2^128 + 5 exactly.
        assert_eq!(
            div_rem_wide(1, 5, 3),
            (0, 113427455640312821154458202477256070487, 0)
        );
        assert_eq!(div_rem_wide(5, 0, 1), (5, 0, 0));
        let d = (1u128 << 127) + 12345;
        for &(a, b) in &[(u128::MAX, 7u128), (1u128 << 100, 1u128 << 90), (d, d)] {
            let (hi, lo) = mul_wide(a, b);
            let (q_hi, q_lo, r) = div_rem_wide(hi, lo, d);
            assert!(r < d);
            // q·d + r == a·b, checked in 256 bits.
            let (p_hi, p_lo) = mul_wide(q_lo, d);
            let (lo_sum, carry) = p_lo.overflowing_add(r);
            let hi_sum = p_hi + q_hi * d + u128::from(carry);
            assert_eq!((hi_sum, lo_sum), (hi, lo));
        }
    }

    #[test]
    fn discrete_rational_conversion_is_exact_and_rounds_up() {
        assert_eq!(ceil_ratio_pow2(1, 3, 4), Some(6)); // 16/3 = 5.33
        assert_eq!(ceil_ratio_pow2(9, 3, 2), Some(12));
        assert_eq!(ceil_ratio_pow2(5, 1, -1), Some(3));
        assert_eq!(ceil_ratio_pow2(4, 1, -1), Some(2));
        assert_eq!(ceil_ratio_pow2(1, 1, -200), Some(1));
        assert_eq!(ceil_ratio_pow2(1, 1, 200), None);
        assert_eq!(decompose(1.5), Some((3 << 51, -52)));
        assert_eq!(decompose(f64::MIN_POSITIVE / 4.0), Some((1 << 50, -1074)));
        assert_eq!(decompose(0.0), None);
        assert_eq!(decompose(f64::INFINITY), None);
        // σ = 3, step = 1: exactly 9.
        let g = DiscreteGaussian::from_sigma_and_step(3.0, 1.0).unwrap();
        assert_eq!(g.sigma_sq(), (9, 1));
        // σ = 1, step = 0.5 (exact in binary): 4.
        let g = DiscreteGaussian::from_sigma_and_step(1.0, 0.5).unwrap();
        assert_eq!(g.sigma_sq(), (4, 1));
        // σ = 0.1 (not dyadic): σ² rounded up to a multiple of 2^-32, within 2^-32.
        let g = DiscreteGaussian::from_sigma_and_step(0.1, 1.0).unwrap();
        let (n, d) = g.sigma_sq();
        assert_eq!(d, 1 << 32);
        let exact = 0.1f64 * 0.1;
        assert!(n as f64 / d as f64 >= exact - 1e-18);
        assert!(n as f64 / d as f64 - exact <= 2.0 / (1u64 << 32) as f64);
    }
}
