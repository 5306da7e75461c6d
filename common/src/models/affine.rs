//! The party's hot loop. For the Gaussian-likelihood models here, the per-row log-likelihood
//! ratio r_x = ℓ(x|θ′) − ℓ(x|θ) is affine in the row, r_x = c + Σ_j w_j x_j, with (w, c)
//! depending only on (θ, θ′). So one kernel serves every such model: each model derives (w, c)
//! once per call and this streams the columns.
use crate::clip::{ClippedSum, clip};
use crate::data::Columns;

/// Rows per block: the partial sums of a block live in a stack buffer that stays in L1.
const BLOCK: usize = 512;
/// Independent accumulators, so the final pass has no loop-carried dependency on one register
/// and vectorises.
const LANES: usize = 8;

/// Σ_x clip(c + w·x, ±bound) over the rows of `cols`, and how many rows the clip changed.
///
/// Columns with `w_j == 0` are skipped (exactly: the data are finite), which makes one-component
/// proposals cheap. The summation order is fixed, so the result is deterministic.
pub fn clipped_affine_sum(cols: &Columns, w: &[f64], c: f64, bound: f64) -> ClippedSum {
    assert_eq!(w.len(), cols.d(), "one weight per column");
    assert!(bound >= 0.0, "clip bound must be non-negative, got {bound}");
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has just been checked for every feature the function enables.
        return unsafe { kernel_avx2(cols, w, c, bound) };
    }
    kernel(cols, w, c, bound)
}

/// Each row's clip(c + w·x, ±bound) into `out`: the per-row terms the minibatch variants
/// need, over a batch of rows (small, so a plain loop).
pub fn clipped_affine_terms(cols: &Columns, w: &[f64], c: f64, bound: f64, out: &mut [f64]) {
    assert_eq!(w.len(), cols.d(), "one weight per column");
    assert_eq!(out.len(), cols.n(), "one term per row");
    out.fill(c);
    for (j, &wj) in w.iter().enumerate().filter(|(_, w)| **w != 0.0) {
        for (o, x) in out.iter_mut().zip(cols.col(j)) {
            *o += wj * x;
        }
    }
    for o in out.iter_mut() {
        *o = clip(*o, bound);
    }
}

/// The same kernel compiled for AVX2/FMA, chosen at run time: a portable build keeps its
/// baseline target and still gets the wide loop where the CPU has it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_avx2(cols: &Columns, w: &[f64], c: f64, bound: f64) -> ClippedSum {
    kernel(cols, w, c, bound)
}

#[inline(always)]
fn kernel(cols: &Columns, w: &[f64], c: f64, bound: f64) -> ClippedSum {
    let n = cols.n();
    let active: Vec<(&[f64], f64)> = (0..cols.d())
        .filter(|&j| w[j] != 0.0)
        .map(|j| (cols.col(j), w[j]))
        .collect();
    let Some((&(last, w_last), rest)) = active.split_last() else {
        // Every row has the same ratio c.
        let r = clip(c, bound);
        return ClippedSum {
            sum: n as f64 * r,
            clipped: if r == c { 0 } else { n as u64 },
        };
    };

    let mut acc = [0.0f64; LANES];
    let mut count = [0u64; LANES];
    let mut buf = [0.0f64; BLOCK];
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        let buf = &mut buf[..len];
        buf.fill(c);
        for &(col, wj) in rest {
            for (b, x) in buf.iter_mut().zip(&col[start..start + len]) {
                *b += wj * x;
            }
        }
        // Last column fused with clip-and-accumulate: one pass fewer over the buffer.
        let last = &last[start..start + len];
        let (buf_chunks, x_chunks) = (buf.chunks_exact(LANES), last.chunks_exact(LANES));
        let (buf_tail, x_tail) = (buf_chunks.remainder(), x_chunks.remainder());
        for (b, x) in buf_chunks.zip(x_chunks) {
            for l in 0..LANES {
                let r = b[l] + w_last * x[l];
                let rc = clip(r, bound);
                acc[l] += rc;
                count[l] += u64::from(rc != r);
            }
        }
        for (l, (b, x)) in buf_tail.iter().zip(x_tail).enumerate() {
            let r = b + w_last * x;
            let rc = clip(r, bound);
            acc[l] += rc;
            count[l] += u64::from(rc != r);
        }
    }
    ClippedSum {
        sum: acc.iter().sum(),
        clipped: count.iter().sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_plain_loop_across_block_boundaries() {
        // n not a multiple of BLOCK or LANES, one zero weight, a bound that binds for some rows.
        let n = 2 * BLOCK + 13;
        let cols = Columns::from_columns(vec![
            (0..n).map(|i| (i as f64 * 0.37).sin()).collect(),
            (0..n).map(|i| i as f64).collect(),
            (0..n).map(|i| (i as f64 * 0.11).cos()).collect(),
        ])
        .unwrap();
        let (w, c, bound) = ([1.5, 0.0, -2.0], 0.25, 1.0);
        let mut expect = ClippedSum::default();
        for i in 0..n {
            let r = c + w[0] * cols.col(0)[i] + w[2] * cols.col(2)[i];
            expect.sum += clip(r, bound);
            expect.clipped += u64::from(r.abs() > bound);
        }
        let got = clipped_affine_sum(&cols, &w, c, bound);
        assert!(expect.clipped > 0 && expect.clipped < n as u64);
        assert_eq!(got.clipped, expect.clipped);
        assert!((got.sum - expect.sum).abs() < 1e-9 * n as f64);
    }

    /// At extreme θ the weights overflow and c + w·x is ±∞ or NaN (∞ − ∞) depending on the
    /// row; each term still lands in [−bound, bound], so the sum stays within n·bound.
    #[test]
    fn non_finite_terms_keep_the_sum_within_n_times_the_bound() {
        let cols = Columns::from_columns(vec![vec![1.0, -1.0, 0.0, f64::MAX, -f64::MAX]]).unwrap();
        for (w, c) in [
            (f64::INFINITY, f64::NEG_INFINITY),
            (f64::INFINITY, 0.0),
            (f64::NEG_INFINITY, f64::INFINITY),
            (1e308, -1e308),
        ] {
            let got = clipped_affine_sum(&cols, &[w], c, 3.0);
            assert!(
                got.sum.is_finite() && got.sum.abs() <= 5.0 * 3.0,
                "w {w}, c {c}: {got:?}"
            );
        }
        // −∞ + ∞·x is NaN for x > 0 and for x = 0 (∞·0), −∞ for x < 0: each becomes −3.
        let got = clipped_affine_sum(&cols, &[f64::INFINITY], f64::NEG_INFINITY, 3.0);
        assert_eq!((got.sum, got.clipped), (-15.0, 5));
        // +∞ + ∞·x: NaN for x ≤ 0 (∞·0 is NaN; → −3), +∞ for x > 0 (→ +3).
        let got = clipped_affine_sum(&cols, &[f64::INFINITY], f64::INFINITY, 3.0);
        assert_eq!((got.sum, got.clipped), (-3.0, 5));
    }

    #[test]
    fn constant_ratio_when_all_weights_vanish() {
        let cols = Columns::from_columns(vec![vec![1.0, 2.0, 3.0]]).unwrap();
        assert_eq!(
            clipped_affine_sum(&cols, &[0.0], 0.5, 1.0),
            ClippedSum {
                sum: 1.5,
                clipped: 0
            }
        );
        assert_eq!(
            clipped_affine_sum(&cols, &[0.0], -5.0, 1.0),
            ClippedSum {
                sum: -3.0,
                clipped: 3
            }
        );
    }
}
