//! FFT convolutions of probability vectors: real-input transforms (realfft over rustfft) of
//! even lengths 2^a·3^b, half the work of complex ones.
use std::cell::RefCell;
use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};

/// The forward and inverse real transforms of one length.
type Plans = (Arc<dyn RealToComplex<f64>>, Arc<dyn ComplexToReal<f64>>);

/// Transform lengths whose plans a thread keeps.
const KEPT_PLANS: usize = 4;

/// The longest transform whose plans are kept: the twiddle factors of both directions take
/// about 24 bytes a point, so at most about 100 MiB stay allocated; longer transforms are
/// planned at each use.
const MAX_KEPT_LEN: usize = 1 << 20;

thread_local! {
    /// The plans of the last [`KEPT_PLANS`] lengths, most recent last. Planning computes the
    /// twiddle factors, a sine and cosine per point, which costs more than the transform
    /// itself; an accountant asked again (a calibration's bisection, a growing composition,
    /// the other direction of a pair) pays them once.
    static PLANS: RefCell<Vec<(usize, Plans)>> = const { RefCell::new(Vec::new()) };
}

/// The transforms of length n, from the thread's cache or planned now.
fn plans(n: usize) -> Plans {
    PLANS.with_borrow_mut(|kept| {
        if let Some(i) = kept.iter().position(|(len, _)| *len == n) {
            let entry = kept.remove(i);
            let plans = entry.1.clone();
            kept.push(entry);
            return plans;
        }
        let mut planner = RealFftPlanner::new();
        let plans = (planner.plan_fft_forward(n), planner.plan_fft_inverse(n));
        if n > MAX_KEPT_LEN {
            return plans;
        }
        if kept.len() == KEPT_PLANS {
            kept.remove(0);
        }
        kept.push((n, plans.clone()));
        plans
    })
}

/// The smallest even 2^a·3^b ≥ n: even for the real transform, smooth for rustfft's fastest
/// radices.
fn fast_len(n: usize) -> usize {
    let mut best = n.max(2).next_power_of_two();
    let mut pow3 = 1usize;
    while pow3 < best {
        let mut m = 2 * pow3;
        while m < n {
            m *= 2;
        }
        best = best.min(m);
        pow3 *= 3;
    }
    best
}

/// The n/2 + 1 non-redundant DFT coefficients of `x` zero-padded to n.
fn spectrum(x: &[f64], n: usize) -> Vec<Complex<f64>> {
    let plan = plans(n).0;
    let mut input = vec![0.0; n];
    input[..x.len()].copy_from_slice(x);
    let mut out = plan.make_output_vec();
    plan.process(&mut input, &mut out)
        .expect("buffers of the planned lengths");
    out
}

/// The inverse DFT (normalised) of the spectrum of a real vector of length n.
fn inverse(mut spectrum: Vec<Complex<f64>>, n: usize) -> Vec<f64> {
    // The first and (n even) last coefficients of a real vector's spectrum are real; products
    // and powers keep them so, up to a sign of zero, which the transform must not see.
    spectrum[0].im = 0.0;
    spectrum[n / 2].im = 0.0;
    let plan = plans(n).1;
    let mut out = plan.make_output_vec();
    plan.process(&mut spectrum, &mut out)
        .expect("buffers of the planned lengths");
    let scale = 1.0 / n as f64;
    for y in &mut out {
        *y *= scale;
    }
    out
}

/// z ↦ z^k for every entry (k ≥ 1), by repeated squaring over blocks that stay in L1 cache,
/// so the inner loops vectorise.
fn power_in_place(z: &mut [Complex<f64>], k: u64) {
    const BLOCK: usize = 512;
    let mut acc = [Complex::new(1.0, 0.0); BLOCK];
    for block in z.chunks_mut(BLOCK) {
        let acc = &mut acc[..block.len()];
        acc.fill(Complex::new(1.0, 0.0));
        let mut bits = k;
        while bits > 0 {
            if bits & 1 == 1 {
                for (a, x) in acc.iter_mut().zip(block.iter()) {
                    *a *= *x;
                }
            }
            bits >>= 1;
            if bits > 0 {
                for x in block.iter_mut() {
                    *x = *x * *x;
                }
            }
        }
        block.copy_from_slice(acc);
    }
}

/// The linear convolution of two non-empty vectors.
pub(super) fn convolve(a: &[f64], b: &[f64]) -> Vec<f64> {
    let len = a.len() + b.len() - 1;
    let n = fast_len(len);
    let mut fa = spectrum(a, n);
    let fb = spectrum(b, n);
    for (x, y) in fa.iter_mut().zip(&fb) {
        *x *= y;
    }
    let mut out = inverse(fa, n);
    out.truncate(len);
    out
}

/// Entries `lo..=hi` of the k-fold self-convolution of `a`, computed as the k-th power of
/// one spectrum of max(hi − lo + 1, len a) points. The transform is circular, so what lies
/// outside `lo..=hi` is folded into the window; the caller bounds that mass (Chernoff).
pub(super) fn self_convolve_window(a: &[f64], k: u64, lo: u64, hi: u64) -> Vec<f64> {
    let len = (hi - lo + 1) as usize;
    let n = fast_len(len.max(a.len()));
    let mut f = spectrum(a, n);
    power_in_place(&mut f, k);
    let mut y = inverse(f, n);
    y.rotate_left((lo % n as u64) as usize);
    y.truncate(len);
    y
}

/// Multiplies `terms` by `factor` entrywise and returns their new sum, in eight lanes so
/// that the loop vectorises.
fn scale_and_sum(terms: &mut [f64], factor: &[f64]) -> f64 {
    const LANES: usize = 8;
    let mut sums = [0.0; LANES];
    let mut chunks = terms.chunks_exact_mut(LANES);
    let mut factors = factor.chunks_exact(LANES);
    for (t, f) in (&mut chunks).zip(&mut factors) {
        for lane in 0..LANES {
            t[lane] *= f[lane];
            sums[lane] += t[lane];
        }
    }
    let mut rest = 0.0;
    for (t, f) in chunks.into_remainder().iter_mut().zip(factors.remainder()) {
        *t *= f;
        rest += *t;
    }
    sums.iter().sum::<f64>() + rest
}

/// [lo, hi] such that the k-fold self-convolution of the sub-probability vector `a` has at
/// most `tail / 2` mass below index lo and at most `tail / 2` above hi: Chernoff's bound
/// P(S ≥ t) ≤ exp(k·ln M(λ) − λt) at orders λ = ±1/len … ±20/len, as dp_accounting's
/// `compute_self_convolve_bounds` (Doroshenko et al. 2022, supplementary eq. (5)).
/// M(λ) = Σ a_i·e^{λi} needs no logarithms: λi ∈ [−20, 20], so no term overflows; the
/// factors of order j + 1 are those of order j times e^{±i/len}, one vectorised pass each.
pub(super) fn chernoff_window(a: &[f64], k: u64, tail: f64) -> (u64, u64) {
    const ORDERS: usize = 20;
    let top = (a.len() as u64 - 1) * k;
    if tail <= 0.0 {
        return (0, top);
    }
    let len = a.len() as f64;
    let step: Vec<f64> = (0..a.len()).map(|i| (i as f64 / len).exp()).collect();
    let back: Vec<f64> = step.iter().map(|e| 1.0 / e).collect();
    let (mut grow, mut shrink) = (a.to_vec(), a.to_vec());
    let (mut up, mut down) = ([0.0f64; ORDERS], [0.0f64; ORDERS]);
    for j in 0..ORDERS {
        up[j] = scale_and_sum(&mut grow, &step);
        down[j] = scale_and_sum(&mut shrink, &back);
    }
    let (mut lo, mut hi) = (0.0f64, top as f64);
    let log_2_over_tail = (2.0 / tail).ln();
    for j in 0..ORDERS {
        let order = (j + 1) as f64 / len;
        let upper = (k as f64 * up[j].ln() + log_2_over_tail) / order;
        let lower = -(k as f64 * down[j].ln() + log_2_over_tail) / order;
        if upper.is_finite() {
            hi = hi.min(upper.ceil());
        }
        if lower.is_finite() {
            lo = lo.max(lower.floor());
        }
    }
    if lo > hi {
        // Cannot happen for a valid bound; keep the whole support rather than trust it.
        return (0, top);
    }
    (lo as u64, hi as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_len_is_smooth_and_minimal() {
        assert_eq!(fast_len(1), 2);
        assert_eq!(fast_len(3), 4);
        assert_eq!(fast_len(5), 6);
        assert_eq!(fast_len(17), 18);
        assert_eq!(fast_len(1025), 1152);
    }

    #[test]
    fn convolutions_match_direct_sums() {
        let a = [0.5, 0.25, 0.25];
        let b = [0.1, 0.9];
        let c = convolve(&a, &b);
        let want = [0.05, 0.475, 0.25, 0.225];
        for (x, y) in c.iter().zip(want) {
            assert!((x - y).abs() < 1e-15);
        }
        // (a*a*a) over the full support equals two direct convolutions.
        let full = self_convolve_window(&a, 3, 0, 6);
        let direct = convolve(&convolve(&a, &a), &a);
        for (x, y) in full.iter().zip(&direct) {
            assert!((x - y).abs() < 1e-15);
        }
    }

    #[test]
    fn chernoff_window_leaves_at_most_half_the_tail_on_each_side() {
        let a = [0.3, 0.4, 0.2, 0.1];
        let k = 200;
        let mut full = a.to_vec();
        for _ in 1..k {
            full = convolve(&full, &a);
        }
        let tail = 1e-9;
        let (lo, hi) = chernoff_window(&a, k, tail);
        assert!(lo > 0 && hi < 3 * k);
        let below: f64 = full[..lo as usize].iter().sum();
        let above: f64 = full[hi as usize + 1..].iter().sum();
        assert!(
            below <= tail / 2.0 && above <= tail / 2.0,
            "{below} {above}"
        );
    }
}
