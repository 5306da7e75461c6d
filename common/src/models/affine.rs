//! The party's hot loops. For the Gaussian-likelihood models here, the per-row log-likelihood
//! ratio r_x = ℓ(x|θ′) − ℓ(x|θ) is affine in the row, r_x = c + Σ_j w_j x_j, with (w, c)
//! depending only on (θ, θ′), and so is the per-row gradient, ∇_θ ℓ(x|θ) = A x + c, with
//! (A, c) depending only on θ. So one kernel per quantity serves every such model: each model
//! derives its coefficients once per call and the kernel streams the columns.
mod lanes;

#[cfg(target_arch = "x86_64")]
use self::lanes::{Avx2, Avx512};
use self::lanes::{Lanes, MAX_LANES, Portable};
use super::sum_clipped_rows;
use crate::clip::{ClippedSum, NORM_CLIP_MARGIN, clip, norm_sq_bound};
use crate::data::Columns;

/// Rows per block: the partial sums of a block live in a stack buffer that stays in L1.
const BLOCK: usize = 512;

/// The `Model` methods of the hot loops, for a model whose per-row ratio and gradient are
/// affine in the row: written once here, they call the model's inherent
/// `affine_ratio(θ, θ′) -> (w, c)` and `affine_grad(θ) -> (A, c)` and stream the columns
/// through this module's kernels. Used inside `impl Model for …`.
macro_rules! affine_hot_loops {
    () => {
        fn clipped_llr_sum(
            &self,
            data: &Columns,
            theta: &[f64],
            theta_prop: &[f64],
            bound: f64,
        ) -> ClippedSum {
            assert_eq!(data.d(), self.row_dim(), "data columns");
            let (w, c) = self.affine_ratio(theta, theta_prop);
            affine::clipped_affine_sum(data, &w, c, bound)
        }

        fn clipped_llr_terms(
            &self,
            data: &Columns,
            theta: &[f64],
            theta_prop: &[f64],
            bound: f64,
            out: &mut [f64],
        ) {
            let (w, c) = self.affine_ratio(theta, theta_prop);
            affine::clipped_affine_terms(data, &w, c, bound, out);
        }

        fn clipped_grad_sum(
            &self,
            data: &Columns,
            theta: &[f64],
            bound: f64,
            out: &mut [f64],
        ) -> u64 {
            assert_eq!(data.d(), self.row_dim(), "data columns");
            let (a, c) = self.affine_grad(theta);
            affine::clipped_affine_grad_sum(data, &a, &c, bound, out)
        }
    };
}
pub(crate) use affine_hot_loops;

/// Σ_x clip(c + w·x, ±bound) over the rows of `cols`, and how many rows the clip changed.
///
/// Columns with `w_j == 0` are skipped (exactly: the data are finite), which makes one-component
/// proposals cheap. The summation order is fixed, so the result is deterministic.
pub fn clipped_affine_sum(cols: &Columns, w: &[f64], c: f64, bound: f64) -> ClippedSum {
    assert_eq!(w.len(), cols.d(), "one weight per column");
    assert!(bound >= 0.0, "clip bound must be non-negative, got {bound}");
    #[cfg(target_arch = "x86_64")]
    if widest() {
        // SAFETY: the CPU has just been checked for every feature the function enables.
        return unsafe { kernel_avx512(cols, w, c, bound) };
    }
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: as above.
        return unsafe { kernel_avx2(cols, w, c, bound) };
    }
    kernel::<Portable>(cols, w, c, bound)
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

/// Σ_x clip_b(A x + c) over the rows of `cols` into `out`, and how many rows the clip
/// changed: the party's clipped gradient sum (Räisä 2020, Sec. 4.2) when A x + c is a row's
/// tempered gradient. Each row is clipped as [`crate::clip::clip_norm`] clips it: scaled to
/// norm at most `bound`, or zero if its norm is not finite.
///
/// `a` holds A (`dim` × `cols.d()`, `dim` = `c.len()` = `out.len()`) column by column:
/// `a[j*dim..(j+1)*dim]` is ∂g/∂x_j, so a model builds each column with its own chain rule.
/// Square A up to [`GRAD_MAX_DIM`] runs a register of rows at a time (A dense, zeros
/// included); other shapes go row by row. The norm test runs on the squared norm (against
/// `clip::norm_sq_bound`), so square roots and divisions run only for the clipped rows,
/// packed into registers. The summation order is fixed, so the result is deterministic.
pub fn clipped_affine_grad_sum(
    cols: &Columns,
    a: &[f64],
    c: &[f64],
    bound: f64,
    out: &mut [f64],
) -> u64 {
    let (dim, d) = (c.len(), cols.d());
    assert_eq!(a.len(), dim * d, "A is dim × columns");
    assert_eq!(out.len(), dim, "one entry per parameter");
    assert!(bound >= 0.0, "clip bound must be non-negative, got {bound}");
    if dim != d || dim > GRAD_MAX_DIM {
        return sum_clipped_rows(cols, bound, out, |x, g| affine_grad_row(a, c, x, g));
    }
    #[cfg(target_arch = "x86_64")]
    if widest() {
        // SAFETY: the CPU has just been checked for every feature the function enables.
        return unsafe { grad_avx512(cols, a, c, bound, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: as above.
        return unsafe { grad_avx2(cols, a, c, bound, out) };
    }
    grad_dims::<Portable>(cols, a, c, bound, out)
}

/// Whether to run the AVX2/FMA copies of the kernels, compiled so that a portable build keeps
/// its baseline target and still gets the wide loops where the CPU has them.
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("popcnt")
}

/// Whether to run the AVX-512 copy of the gradient kernel.
#[cfg(target_arch = "x86_64")]
fn widest() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("popcnt")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,popcnt")]
unsafe fn kernel_avx2(cols: &Columns, w: &[f64], c: f64, bound: f64) -> ClippedSum {
    kernel::<Avx2>(cols, w, c, bound)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
unsafe fn kernel_avx512(cols: &Columns, w: &[f64], c: f64, bound: f64) -> ClippedSum {
    kernel::<Avx512>(cols, w, c, bound)
}

/// Block by block: the ratios less the last column's term into a buffer, then the last column
/// fused with clip-and-accumulate, two registers at a time in explicit lanes (the
/// autovectoriser kept part of that loop scalar).
#[inline(always)]
fn kernel<V: Lanes>(cols: &Columns, w: &[f64], c: f64, bound: f64) -> ClippedSum {
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

    let (low, high, w_lanes) = (V::splat(-bound), V::splat(bound), V::splat(w_last));
    let step = 2 * V::W;
    let mut acc = [V::splat(0.0); 2];
    let mut tail = 0.0;
    let mut count = 0u64;
    let mut buf = [0.0f64; BLOCK];
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        let buf = &mut buf[..len];
        match rest.split_first() {
            // c + w_j x_j in one pass, not a fill with c and another.
            Some((&(col, wj), more)) => {
                for (b, x) in buf.iter_mut().zip(&col[start..start + len]) {
                    *b = c + wj * x;
                }
                for &(col, wj) in more {
                    for (b, x) in buf.iter_mut().zip(&col[start..start + len]) {
                        *b += wj * x;
                    }
                }
            }
            None => buf.fill(c),
        }
        let last = &last[start..start + len];
        let full = len - len % step;
        for i in (0..full).step_by(step) {
            for (h, acc) in acc.iter_mut().enumerate() {
                let j = i + h * V::W;
                let r = V::load(&buf[j..]).add(w_lanes.mul(V::load(&last[j..])));
                let rc = r.clip(low, high);
                *acc = acc.add(rc);
                count += u64::from(V::bits(rc.ne(r)).count_ones());
            }
        }
        // The last block's last rows.
        for (b, x) in buf[full..].iter().zip(&last[full..]) {
            let r = b + w_last * x;
            let rc = clip(r, bound);
            tail += rc;
            count += u64::from(rc != r);
        }
    }
    ClippedSum {
        sum: acc[0].add(acc[1]).sum() + tail,
        clipped: count,
    }
}

/// One row's A x + c into `g`, `a` column by column as in [`clipped_affine_grad_sum`].
fn affine_grad_row(a: &[f64], c: &[f64], x: &[f64], g: &mut [f64]) {
    g.copy_from_slice(c);
    for (column, &xj) in a.chunks_exact(c.len()).zip(x) {
        for (gk, akj) in g.iter_mut().zip(column) {
            *gk += akj * xj;
        }
    }
}

/// The largest square A with a register kernel of its own (one instance per dimension).
pub const GRAD_MAX_DIM: usize = 8;

/// The gradient kernel in AVX2 registers, with fused multiply-adds: so its last bits can
/// differ from the portable copy's, each deterministic.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,popcnt")]
unsafe fn grad_avx2(cols: &Columns, a: &[f64], c: &[f64], bound: f64, out: &mut [f64]) -> u64 {
    grad_dims::<Avx2>(cols, a, c, bound, out)
}

/// The gradient kernel in AVX-512 registers: twice the rows of AVX2 per instruction, masks in
/// mask registers and a packing instruction of its own. Its last bits can differ from the
/// other copies', each deterministic.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
unsafe fn grad_avx512(cols: &Columns, a: &[f64], c: &[f64], bound: f64, out: &mut [f64]) -> u64 {
    grad_dims::<Avx512>(cols, a, c, bound, out)
}

#[inline(always)]
fn grad_dims<V: Lanes>(cols: &Columns, a: &[f64], c: &[f64], bound: f64, out: &mut [f64]) -> u64 {
    match c.len() {
        1 => grad_kernel::<V, 1>(cols, a, c, bound, out),
        2 => grad_kernel::<V, 2>(cols, a, c, bound, out),
        3 => grad_kernel::<V, 3>(cols, a, c, bound, out),
        4 => grad_kernel::<V, 4>(cols, a, c, bound, out),
        5 => grad_kernel::<V, 5>(cols, a, c, bound, out),
        6 => grad_kernel::<V, 6>(cols, a, c, bound, out),
        7 => grad_kernel::<V, 7>(cols, a, c, bound, out),
        8 => grad_kernel::<V, 8>(cols, a, c, bound, out),
        dim => unreachable!("no register kernel for dimension {dim}"),
    }
}

/// Two registers' rows a step, each group with accumulators of its own (so that the adds
/// overlap). Each group adds its rows kept whole and packs the gradients of its clipped rows
/// into a buffer, without a branch; when the buffer fills, and at the end, they are clipped a
/// register at a time. So the square roots and divisions, dearer than the rest of a row
/// together, are paid once per register of clipped rows, and no row is read twice.
#[inline(always)]
fn grad_kernel<V: Lanes, const D: usize>(
    cols: &Columns,
    a: &[f64],
    c: &[f64],
    bound: f64,
    out: &mut [f64],
) -> u64 {
    let (n, w) = (cols.n(), V::W);
    let map = GradMap::<V, D>::new(a, c, bound);
    let n_full = n - n % (2 * w);
    let x: [&[f64]; D] = std::array::from_fn(|j| &cols.col(j)[..n_full]);
    let rows = |r: usize| std::array::from_fn(|j| V::load(&x[j][r..]));
    let mut kept = [[V::splat(0.0); D]; 2];
    let mut clipped = [V::splat(0.0); D];
    let mut count = 0u64;
    // The clipped rows not yet added: `held[k][i]` is entry k of the i-th, for i < `len`.
    let mut held = [[0.0f64; HELD]; D];
    let mut len = 0;
    for r in (0..n_full).step_by(2 * w) {
        for (h, acc) in kept.iter_mut().enumerate() {
            let (g, s) = map.grads(rows(r + w * h));
            len = hold(&mut held, len, g, map.add_kept(g, s, acc));
        }
        if len > HELD - 2 * w {
            map.add_clipped(&held, len, &mut clipped);
            count += len as u64;
            len = 0;
        }
    }
    if n_full < n {
        // The last rows, padded with zero rows that are masked out (kept, adding +0).
        let tail: [[f64; 2 * MAX_LANES]; D] = std::array::from_fn(|j| {
            std::array::from_fn(|l| cols.col(j).get(n_full + l).copied().unwrap_or(0.0))
        });
        for (h, acc) in kept.iter_mut().enumerate() {
            let real = V::first((n - n_full).saturating_sub(w * h));
            let (g, s) = map.grads(std::array::from_fn(|j| V::load(&tail[j][w * h..])));
            let (g, s) = (g.map(|v| v.select(real)), s.select(real));
            len = hold(&mut held, len, g, map.add_kept(g, s, acc));
        }
    }
    map.add_clipped(&held, len, &mut clipped);
    count += len as u64;
    for (k, o) in out.iter_mut().enumerate() {
        *o = kept[0][k].add(kept[1][k]).add(clipped[k]).sum();
    }
    count
}

/// Clipped rows held at most before they are added: a few kB, which stay in L1.
const HELD: usize = 256;

/// Holds the rows of `g` whose bit is clear in `whole` after the `len` rows in `held`, and
/// returns the new length. A whole register is stored, the clipped rows first, so the caller
/// keeps room for one.
#[inline(always)]
fn hold<V: Lanes, const D: usize>(
    held: &mut [[f64; HELD]; D],
    len: usize,
    g: [V; D],
    whole: u32,
) -> usize {
    let cut = !whole & ((1 << V::W) - 1);
    for (held, g) in held.iter_mut().zip(g) {
        g.pack(cut).store(&mut held[len..]);
    }
    len + cut.count_ones() as usize
}

/// A call's A, c and clip, splatted once into lanes.
struct GradMap<V, const D: usize> {
    /// `a[k][j]` = A_kj.
    a: [[V; D]; D],
    c: [V; D],
    /// The norm a clipped row is scaled to: the bound less [`NORM_CLIP_MARGIN`].
    target: V,
    /// Whether every squared norm above `keep` is in the range of [`Lanes::div_sqrt`]: the
    /// bound is at least 2⁻⁵⁰⁰ (below, the clipped rows take an exact root and division).
    estimate: bool,
    /// A row is kept whole iff its squared norm is at most this.
    keep: V,
    /// A row adds nothing iff its squared norm is above this: NaN, or ∞ under a finite bound
    /// (an infinite bound keeps it, as `clip_norm` does).
    finite: V,
}

impl<V: Lanes, const D: usize> GradMap<V, D> {
    #[inline(always)]
    fn new(a: &[f64], c: &[f64], bound: f64) -> Self {
        let keep = norm_sq_bound(bound);
        GradMap {
            a: std::array::from_fn(|k| std::array::from_fn(|j| V::splat(a[j * D + k]))),
            c: std::array::from_fn(|k| V::splat(c[k])),
            target: V::splat(bound * NORM_CLIP_MARGIN),
            estimate: bound >= f64::powi(2.0, -500),
            keep: V::splat(keep),
            finite: V::splat(keep.max(f64::MAX)),
        }
    }

    /// A register of rows' gradients c + A x and their squared norms.
    #[inline(always)]
    fn grads(&self, x: [V; D]) -> ([V; D], V) {
        let g: [V; D] =
            std::array::from_fn(|k| (0..D).fold(self.c[k], |v, j| self.a[k][j].mul_add(x[j], v)));
        (g, norm_sq(g))
    }

    /// Adds the rows kept whole to `acc`; returns their mask bits.
    #[inline(always)]
    fn add_kept(&self, g: [V; D], s: V, acc: &mut [V; D]) -> u32 {
        let whole = s.le(self.keep);
        for (acc, g) in acc.iter_mut().zip(g) {
            *acc = acc.add_in(g, whole);
        }
        V::bits(whole)
    }

    /// Adds the first `len` rows `held` (none of them kept whole), each scaled by
    /// min(1, margin·bound/‖g‖) (the scale `clip_norm` applies), or nothing if its norm is
    /// not finite (select, not multiply: a non-finite row times 0 would be NaN).
    #[inline(always)]
    fn add_clipped(&self, held: &[[f64; HELD]; D], len: usize, acc: &mut [V; D]) {
        for i in (0..len).step_by(V::W) {
            let g: [V; D] = std::array::from_fn(|k| V::load(&held[k][i..]));
            let s = norm_sq(g);
            let scale = if self.estimate {
                s.div_sqrt(self.target)
            } else {
                self.target.div(s.sqrt())
            }
            .min_one();
            let scaled = V::both(s.le(self.finite), V::first(len - i));
            for (acc, g) in acc.iter_mut().zip(g) {
                *acc = acc.add_in(g.mul(scale), scaled);
            }
        }
    }
}

/// A register of rows' squared norms.
#[inline(always)]
fn norm_sq<V: Lanes, const D: usize>(g: [V; D]) -> V {
    (1..D).fold(g[0].mul(g[0]), |s, k| g[k].mul_add(g[k], s))
}

#[cfg(test)]
mod tests {
    use super::*;

    type RatioFn = fn(&Columns, &[f64], f64, f64) -> ClippedSum;
    type GradFn = fn(&Columns, &[f64], &[f64], f64, &mut [f64]) -> u64;

    /// Each copy of the kernels this CPU runs, by name, with its ratio and gradient kernels:
    /// the dispatch picks one only.
    fn copies() -> Vec<(&'static str, RatioFn, GradFn)> {
        let mut copies: Vec<(&str, RatioFn, GradFn)> =
            vec![("portable", kernel::<Portable>, grad_dims::<Portable>)];
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: each copy runs only if the CPU has the features it enables.
            if wide() {
                copies.push((
                    "avx2",
                    |x, w, c, b| unsafe { kernel_avx2(x, w, c, b) },
                    |x, a, c, b, out| unsafe { grad_avx2(x, a, c, b, out) },
                ));
            }
            if widest() {
                copies.push((
                    "avx512",
                    |x, w, c, b| unsafe { kernel_avx512(x, w, c, b) },
                    |x, a, c, b, out| unsafe { grad_avx512(x, a, c, b, out) },
                ));
            }
        }
        copies
    }

    #[test]
    fn matches_a_plain_loop_across_block_boundaries() {
        // n not a multiple of BLOCK or of a register, one zero weight, a bound that binds for
        // some rows; every copy of the kernel, and the dispatch.
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
        assert!(expect.clipped > 0 && expect.clipped < n as u64);
        let dispatch: RatioFn = clipped_affine_sum;
        for (name, ratio) in copies()
            .into_iter()
            .map(|(name, ratio, _)| (name, ratio))
            .chain([("dispatch", dispatch)])
        {
            let got = ratio(&cols, &w, c, bound);
            assert_eq!(got.clipped, expect.clipped, "{name}");
            assert!((got.sum - expect.sum).abs() < 1e-9 * n as f64, "{name}");
        }
    }

    /// At extreme θ the weights overflow and c + w·x is ±∞ or NaN (∞ − ∞) depending on the
    /// row; each term still lands in [−bound, bound], so the sum stays within n·bound. In every
    /// copy of the kernel, on five rows and on them four times over (so in full registers as
    /// well as in the rows past the last one).
    #[test]
    fn non_finite_terms_keep_the_sum_within_n_times_the_bound() {
        let five = [1.0, -1.0, 0.0, f64::MAX, -f64::MAX];
        for ((name, ratio, _), times) in copies().into_iter().flat_map(|c| [(c, 1), (c, 4)]) {
            let cols = Columns::from_columns(vec![five.repeat(times)]).unwrap();
            let (n, at) = (cols.n() as f64, format!("{name}, {times} × 5 rows"));
            for (w, c) in [
                (f64::INFINITY, f64::NEG_INFINITY),
                (f64::INFINITY, 0.0),
                (f64::NEG_INFINITY, f64::INFINITY),
                (1e308, -1e308),
            ] {
                let got = ratio(&cols, &[w], c, 3.0);
                assert!(
                    got.sum.is_finite() && got.sum.abs() <= n * 3.0,
                    "{at}: w {w}, c {c}: {got:?}"
                );
            }
            // −∞ + ∞·x is NaN for x > 0 and for x = 0 (∞·0), −∞ for x < 0: each becomes −3.
            let got = ratio(&cols, &[f64::INFINITY], f64::NEG_INFINITY, 3.0);
            assert_eq!((got.sum, got.clipped), (-3.0 * n, cols.n() as u64), "{at}");
            // +∞ + ∞·x: NaN for x ≤ 0 (∞·0 is NaN; → −3), +∞ for x > 0 (→ +3).
            let got = ratio(&cols, &[f64::INFINITY], f64::INFINITY, 3.0);
            assert_eq!(
                (got.sum, got.clipped),
                (-3.0 * times as f64, cols.n() as u64),
                "{at}"
            );
        }
    }

    /// The rows of `n` × `d` data that vary smoothly, with a few large rows.
    fn wavy(n: usize, d: usize) -> Columns {
        Columns::from_columns(
            (0..d)
                .map(|j| {
                    (0..n)
                        .map(|i| {
                            (i as f64 * (0.37 + 0.1 * j as f64)).sin() * (1.0 + (i % 97) as f64)
                        })
                        .collect()
                })
                .collect(),
        )
        .unwrap()
    }

    /// The plain loop: each row's A x + c through `clip_norm`.
    fn by_rows(cols: &Columns, a: &[f64], c: &[f64], bound: f64) -> (Vec<f64>, u64) {
        let mut out = vec![0.0; c.len()];
        let clipped = sum_clipped_rows(cols, bound, &mut out, |x, g| affine_grad_row(a, c, x, g));
        (out, clipped)
    }

    /// Every copy of the register kernel, and the dispatch (the row-by-row path past
    /// [`GRAD_MAX_DIM`]), against the plain loop: across many registers with a partial last
    /// one, and with only a partial register; some zero entries of A; at a bound that binds
    /// for about half the rows, for none and for all (so the clipped rows fill the buffer that
    /// holds them several times).
    #[test]
    fn gradient_kernel_matches_the_plain_loop() {
        for (dim, n) in (1..=GRAD_MAX_DIM + 1).flat_map(|dim| [(dim, 2 * BLOCK + 13), (dim, 3)]) {
            let cols = wavy(n, dim);
            let a: Vec<f64> = (0..dim * dim)
                .map(|i| {
                    if i % 3 == 1 {
                        0.0
                    } else {
                        0.1 * (i as f64 + 1.0).cos()
                    }
                })
                .collect();
            let c: Vec<f64> = (0..dim).map(|k| 0.3 - 0.2 * k as f64).collect();
            let mut norms: Vec<f64> = (0..cols.n())
                .map(|i| {
                    let (mut x, mut g) = (vec![0.0; dim], vec![0.0; dim]);
                    cols.row_into(i, &mut x);
                    affine_grad_row(&a, &c, &x, &mut g);
                    g.iter().map(|v| v * v).sum::<f64>().sqrt()
                })
                .collect();
            norms.sort_by(f64::total_cmp);
            // Halfway between two rows' norms, so that rounding cannot move a row across it.
            let median = 0.5 * (norms[n / 2] + norms[n / 2 + 1]);
            let mut runs: Vec<(&str, GradFn)> = vec![("dispatch", clipped_affine_grad_sum)];
            if dim <= GRAD_MAX_DIM {
                runs.extend(copies().into_iter().map(|(name, _, grad)| (name, grad)));
            }
            for bound in [median, 0.0, f64::INFINITY] {
                let (expect, expect_clipped) = by_rows(&cols, &a, &c, bound);
                let scale: f64 = norms.iter().map(|v| v.min(bound)).sum();
                for (name, run) in &runs {
                    let mut got = vec![0.0; dim];
                    let clipped = run(&cols, &a, &c, bound, &mut got);
                    let at = format!("{name}, dim {dim}, bound {bound}");
                    assert_eq!(clipped, expect_clipped, "{at}");
                    if bound == median && n > 3 {
                        assert!(clipped > 400 && clipped < 600, "{at}: {clipped}");
                    }
                    for (g, e) in got.iter().zip(&expect) {
                        assert!((g - e).abs() <= 1e-12 * scale, "{at}: {g} vs {e}");
                    }
                }
            }
        }
    }

    /// A clipped row, alone in a call, comes out inside the bound and within 10⁻¹¹ of it, in
    /// every copy of the kernel: rows of 1 to 8 entries whose norms span 300 decades (as far
    /// as their squares do not overflow or underflow), so the exact path for bounds under
    /// 2⁻⁵⁰⁰ runs as well as the AVX-512 estimate near both ends of its range.
    #[test]
    fn clipped_rows_stay_inside_the_bound_in_every_copy() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for case in 0..4000 {
            let dim = 1 + case % GRAD_MAX_DIM;
            let size = 10f64.powf(rng.random_range(-152.0..152.0));
            let x: Vec<Vec<f64>> = (0..dim)
                .map(|_| vec![rng.random_range(-1.0..1.0) * size])
                .collect();
            let norm = x.iter().map(|v| v[0] * v[0]).sum::<f64>().sqrt();
            let bound = norm * rng.random_range(0.001..0.999);
            let cols = Columns::from_columns(x).unwrap();
            let identity: Vec<f64> = (0..dim * dim)
                .map(|i| if i % (dim + 1) == 0 { 1.0 } else { 0.0 })
                .collect();
            for (name, _, run) in copies() {
                let mut got = vec![0.0; dim];
                let clipped = run(&cols, &identity, &vec![0.0; dim], bound, &mut got);
                let after = got.iter().map(|v| v * v).sum::<f64>().sqrt();
                let at = format!("{name}, case {case}, dim {dim}: {after:e} vs bound {bound:e}");
                assert_eq!(clipped, 1, "{at}");
                assert!(after <= bound && after >= bound * (1.0 - 1e-11), "{at}");
            }
        }
    }

    /// A row whose gradient is ∞ or NaN (an infinite entry of A times a row value, ∞ · 0,
    /// a NaN in c) or whose squared norm overflows adds nothing and counts as clipped, whatever
    /// the bound; the other rows are untouched. In every copy of the kernel, on nine rows and
    /// on them three times over (so in full registers as well as in the last, padded one).
    #[test]
    fn non_finite_gradients_add_nothing() {
        let nine = [
            [1.0, -1.0, 0.0, 1e300, 2.0, 0.5, -0.25, 1.0, 0.0],
            [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
        ];
        for times in [1, 3] {
            let cols = Columns::from_columns(nine.map(|x| x.repeat(times)).to_vec()).unwrap();
            let (n, r) = (cols.n() as u64, times as f64);
            for ((name, _, run), bound) in copies()
                .into_iter()
                .flat_map(|copy| [1.0, 1e6, f64::INFINITY].map(|bound| (copy, bound)))
            {
                let at = format!("{name}, {times} × 9 rows, bound {bound}");
                // Finite A and c: only row 3's squared norm (1e600) is not finite.
                let (a, c) = ([1.0, 0.0, 0.0, 1.0], [0.0, 0.0]);
                let mut got = [0.0; 2];
                let clipped = run(&cols, &a, &c, bound, &mut got);
                let (expect, expect_clipped) = by_rows(&cols, &a, &c, bound);
                assert_eq!(clipped, expect_clipped, "{at}");
                for (g, e) in got.iter().zip(&expect) {
                    assert!((g - e).abs() <= 1e-12 * e.abs(), "{at}: {g} vs {e}");
                }
                if bound == 1e6 {
                    assert_eq!(clipped, times as u64, "{at}");
                    assert_eq!(got, [3.25 * r, 4.0 * r], "{at}");
                }
                // ∞ in A: every row's first entry is ±∞, or NaN where x_0 = 0.
                let a = [f64::INFINITY, 0.0, 0.0, 1.0];
                let clipped = run(&cols, &a, &c, bound, &mut got);
                let ok = bound.is_infinite(); // an infinite bound keeps ±∞ rows, as clip_norm does
                assert_eq!(clipped, if ok { 2 * times as u64 } else { n }, "{at}");
                assert_eq!(got[1], if ok { 3.5 * r } else { 0.0 }, "{at}");
                // NaN in c: every row is NaN.
                let c = [f64::NAN, 0.0];
                let clipped = run(&cols, &[1.0, 0.0, 0.0, 1.0], &c, bound, &mut got);
                assert_eq!((got, clipped), ([0.0, 0.0], n), "{at}");
            }
        }
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
