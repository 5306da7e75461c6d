//! FFT convolutions of probability vectors (rustfft, complex transforms of 2^a·3^b points).
use rustfft::FftPlanner;
use rustfft::num_complex::Complex;

/// The smallest 2^a·3^b ≥ n: sizes rustfft handles with its fastest radices.
fn fast_len(n: usize) -> usize {
    let mut best = n.next_power_of_two();
    let mut pow3 = 1usize;
    while pow3 < best {
        let mut m = pow3;
        while m < n {
            m *= 2;
        }
        best = best.min(m);
        pow3 *= 3;
    }
    best
}

/// The n-point DFT of `x` zero-padded to n.
fn spectrum(planner: &mut FftPlanner<f64>, x: &[f64], n: usize) -> Vec<Complex<f64>> {
    let mut buf: Vec<Complex<f64>> = x.iter().map(|&v| Complex::new(v, 0.0)).collect();
    buf.resize(n, Complex::new(0.0, 0.0));
    planner.plan_fft_forward(n).process(&mut buf);
    buf
}

/// The real part of the inverse DFT (normalised).
fn inverse(planner: &mut FftPlanner<f64>, mut buf: Vec<Complex<f64>>) -> Vec<f64> {
    let n = buf.len();
    planner.plan_fft_inverse(n).process(&mut buf);
    let scale = 1.0 / n as f64;
    buf.into_iter().map(|c| c.re * scale).collect()
}

/// z^k by repeated squaring (k ≥ 1).
fn powu(mut z: Complex<f64>, mut k: u64) -> Complex<f64> {
    let mut acc = Complex::new(1.0, 0.0);
    while k > 0 {
        if k & 1 == 1 {
            acc *= z;
        }
        z *= z;
        k >>= 1;
    }
    acc
}

/// The linear convolution of two non-empty vectors.
pub(super) fn convolve(a: &[f64], b: &[f64]) -> Vec<f64> {
    let len = a.len() + b.len() - 1;
    let n = fast_len(len);
    let mut planner = FftPlanner::new();
    let mut fa = spectrum(&mut planner, a, n);
    let fb = spectrum(&mut planner, b, n);
    for (x, y) in fa.iter_mut().zip(&fb) {
        *x *= y;
    }
    let mut out = inverse(&mut planner, fa);
    out.truncate(len);
    out
}

/// Entries `lo..=hi` of the k-fold self-convolution of `a`, computed as the k-th power of
/// one spectrum of max(hi − lo + 1, len a) points. The transform is circular, so what lies
/// outside `lo..=hi` is folded into the window; the caller bounds that mass (Chernoff).
pub(super) fn self_convolve_window(a: &[f64], k: u64, lo: u64, hi: u64) -> Vec<f64> {
    let len = (hi - lo + 1) as usize;
    let n = fast_len(len.max(a.len()));
    let mut planner = FftPlanner::new();
    let mut f = spectrum(&mut planner, a, n);
    for z in &mut f {
        *z = powu(*z, k);
    }
    let y = inverse(&mut planner, f);
    let start = (lo % n as u64) as usize;
    (0..len).map(|i| y[(start + i) % n]).collect()
}

/// [lo, hi] such that the k-fold self-convolution of the sub-probability vector `a` has at
/// most `tail / 2` mass below index lo and at most `tail / 2` above hi: Chernoff's bound
/// P(S ≥ t) ≤ exp(k·ln M(λ) − λt) at orders λ = ±1/len … ±20/len, as dp_accounting's
/// `compute_self_convolve_bounds` (Doroshenko et al. 2022, supplementary eq. (5)).
pub(super) fn chernoff_window(a: &[f64], k: u64, tail: f64) -> (u64, u64) {
    let top = (a.len() as u64 - 1) * k;
    if tail <= 0.0 {
        return (0, top);
    }
    let (mut lo, mut hi) = (0.0f64, top as f64);
    let len = a.len() as f64;
    let log_2_over_tail = (2.0 / tail).ln();
    for j in (-20..=20).filter(|&j| j != 0) {
        let order = f64::from(j) / len;
        let log_mgf = log_sum_exp(
            a.iter()
                .enumerate()
                .filter(|&(_, &p)| p > 0.0)
                .map(|(i, &p)| p.ln() + order * i as f64),
        );
        let bound = (k as f64 * log_mgf + log_2_over_tail) / order;
        if !bound.is_finite() {
            continue;
        }
        if order > 0.0 {
            hi = hi.min(bound.ceil());
        } else {
            lo = lo.max(bound.floor());
        }
    }
    if lo > hi {
        // Cannot happen for a valid bound; keep the whole support rather than trust it.
        return (0, top);
    }
    (lo as u64, hi as u64)
}

/// ln Σ e^{x_i} without overflow (−∞ for an empty sum).
fn log_sum_exp(xs: impl Iterator<Item = f64> + Clone) -> f64 {
    let m = xs.clone().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + xs.map(|x| (x - m).exp()).sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_len_is_smooth_and_minimal() {
        assert_eq!(fast_len(1), 1);
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
