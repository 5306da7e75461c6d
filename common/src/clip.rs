//! Per-row clipping of log-likelihood ratios (DESIGN §3): it bounds each row's influence on
//! the released sum, which is what gives the sum a finite sensitivity.

/// The per-row bound `clip · ‖θ′ − θ‖₂` of Räisä 2020 Sec. 3.1 (the Lipschitz form
/// |ℓ(x|θ′) − ℓ(x|θ)| ≤ L‖θ′ − θ‖₂ with L = `clip`).
pub fn row_bound(clip: f64, theta: &[f64], theta_prop: &[f64]) -> f64 {
    clip * distance(theta, theta_prop)
}

/// Euclidean distance ‖a − b‖₂.
pub fn distance(a: &[f64], b: &[f64]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}

/// A clipped sum over rows and how many rows the clip changed. The count is data-dependent
/// and is never released; it is for local diagnostics and simulations only.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClippedSum {
    pub sum: f64,
    pub clipped: u64,
}

impl ClippedSum {
    /// Adds one row's term `r` clipped to ±`bound` by [`clip`], counting the row if the
    /// clip changed it (NaN included).
    #[inline(always)]
    pub fn add(&mut self, r: f64, bound: f64) {
        let rc = clip(r, bound);
        self.sum += rc;
        self.clipped += u64::from(rc != r);
    }
}

/// Clip one row's term to `[-bound, bound]`, by a fixed rule that needs no finite input:
/// ±∞ becomes ±bound and NaN (a term such as ∞ − ∞ at extreme parameters) becomes −bound, as
/// if the row made the proposal as unlikely as the clip allows.
///
/// So every row's clipped term lies in `[-bound, bound]` whatever the row holds, and the
/// sensitivity argument holds unchanged: substituting one row moves a sum of clipped terms by
/// at most 2·bound, adding or removing one by at most bound. The sum of n terms is at most
/// n·bound in magnitude, so it is finite whenever n·bound is: a release path checks that
/// public product before it reads a row, and never has to refuse after reading them.
///
/// Written as two selects, each false for NaN, so it compiles to a max and a min with no
/// extra NaN test in the hot loop (an explicit `is_nan` branch cost 60% of its throughput).
#[inline(always)]
pub fn clip(r: f64, bound: f64) -> f64 {
    let low = if r > -bound { r } else { -bound };
    if low < bound { low } else { bound }
}

/// What a scaled row's target norm is short of the clip: 2⁻⁴⁰ (≈ 9·10⁻¹³) relative. A row
/// scaled to `bound` exactly comes out some ulps either side of it after rounding (its
/// squared norm, root, quotient and products each round, about d/2 + 8 ulps in all for d
/// entries and a scale within 4 ulps, as the hot loop's estimate of 1/√s is), and the
/// sensitivity is a promise: aimed 2⁻⁴⁰ = 8192 ulps inside, the scaled row's norm is at most
/// `bound` with rounding included, for gradients of up to 10 000 entries. Shrinking a
/// clipped row never weakens the guarantee, and 10⁻¹² of a clipped row is far below the
/// noise.
pub const NORM_CLIP_MARGIN: f64 = 1.0 - 1.0 / (1u64 << 40) as f64;

/// Scales one row's gradient to L2 norm at most `bound` (Räisä 2020, Sec. 4.2: the per-row
/// gradient clip clip_b(∇ℓ(x|θ))), and says whether it changed it. Like [`clip`] it needs no
/// finite input: a gradient whose norm is not finite (an ∞ or NaN entry) becomes the zero
/// vector, so every clipped row lies in the ball of radius `bound` whatever the row holds.
/// A row over the bound is scaled to [`NORM_CLIP_MARGIN`]·`bound`, so that after rounding it
/// is still inside.
#[inline(always)]
pub fn clip_norm(g: &mut [f64], bound: f64) -> bool {
    let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm <= bound {
        return false;
    }
    if norm.is_finite() {
        let scale = bound * NORM_CLIP_MARGIN / norm;
        g.iter_mut().for_each(|v| *v *= scale);
    } else {
        g.fill(0.0);
    }
    true
}

/// The largest t with √t ≤ `bound` in floating point, so that `norm_sq <= t` decides
/// [`clip_norm`]'s `norm <= bound` exactly, with no square root per row (the hot loop takes
/// roots only of the rows it clips). Exact because a correctly rounded square root is monotone:
/// the squares it keeps are an interval [0, t]. Starts from bound², a few ulps from t.
pub(crate) fn norm_sq_bound(bound: f64) -> f64 {
    debug_assert!(bound >= 0.0);
    let mut t = bound * bound;
    while t.sqrt() > bound {
        t = t.next_down();
    }
    while t < f64::INFINITY && t.next_up().sqrt() <= bound {
        t = t.next_up();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_bounds_both_sides() {
        assert_eq!(clip(5.0, 2.0), 2.0);
        assert_eq!(clip(-5.0, 2.0), -2.0);
        assert_eq!(clip(1.0, 2.0), 1.0);
        assert_eq!(row_bound(2.0, &[0.0, 0.0], &[3.0, 4.0]), 10.0);
    }

    #[test]
    fn gradient_clip_scales_to_the_bound_and_zeroes_non_finite_rows() {
        let mut g = [3.0, 4.0];
        assert!(clip_norm(&mut g, 1.0));
        assert!((g[0] - 0.6).abs() < 1e-12 && (g[1] - 0.8).abs() < 1e-12);
        assert!(g[0] < 0.6 && g[1] < 0.8, "scaled inside the bound: {g:?}");
        let mut small = [0.3, 0.4];
        assert!(!clip_norm(&mut small, 1.0));
        assert_eq!(small, [0.3, 0.4]);
        for bad in [
            [f64::INFINITY, 1.0],
            [f64::NAN, 1.0],
            [f64::NEG_INFINITY, f64::NAN],
        ] {
            let mut g = bad;
            assert!(clip_norm(&mut g, 1.0));
            assert_eq!(g, [0.0, 0.0]);
        }
    }

    /// The margin keeps a clipped row inside the bound through rounding, over random rows of
    /// 2 to 1000 entries with magnitudes over 40 decades, their norm summed in f64 as the
    /// norm test sums it.
    #[test]
    fn clipped_rows_stay_inside_the_bound_after_rounding() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for case in 0..20_000 {
            let d = [2, 3, 10, 1000][case % 4];
            let scale = 10f64.powf(rng.random_range(-20.0..20.0));
            let mut g: Vec<f64> = (0..d)
                .map(|_| rng.random_range(-1.0..1.0) * scale)
                .collect();
            let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
            let bound = norm * rng.random_range(0.01..0.999);
            assert!(clip_norm(&mut g, bound));
            let after = g.iter().map(|v| v * v).sum::<f64>().sqrt();
            assert!(after <= bound, "case {case}: {after:e} > {bound:e}");
            assert!(
                after >= bound * (1.0 - 1e-11),
                "case {case}: {after:e} ≪ {bound:e}"
            );
        }
    }

    #[test]
    fn norm_sq_bound_decides_the_norm_test_exactly() {
        for bound in [
            0.0,
            5e-324,
            1e-160,
            0.1,
            1.0,
            2.0,
            3.0,
            0.7,
            1e100,
            1e200,
            f64::MAX,
        ] {
            let t = norm_sq_bound(bound);
            assert!(t.sqrt() <= bound, "bound {bound}");
            assert!(
                t == f64::INFINITY || t.next_up().sqrt() > bound,
                "bound {bound}"
            );
            // And on a spread of squares (never negative) around it, the two tests agree.
            let mut s = t;
            for _ in 0..64 {
                s = s.next_down().max(0.0);
            }
            for _ in 0..128 {
                assert_eq!(s <= t, s.sqrt() <= bound, "bound {bound}, s {s}");
                s = s.next_up();
            }
        }
        assert_eq!(norm_sq_bound(f64::INFINITY), f64::INFINITY);
        assert_eq!(norm_sq_bound(0.0), 0.0);
    }

    #[test]
    fn non_finite_terms_map_into_the_bound() {
        assert_eq!(clip(f64::INFINITY, 2.0), 2.0);
        assert_eq!(clip(f64::NEG_INFINITY, 2.0), -2.0);
        assert_eq!(clip(f64::NAN, 2.0), -2.0);
        assert_eq!(clip(f64::NAN, 0.0), 0.0);
        assert_eq!(clip(-0.5, 2.0), -0.5);
    }
}
