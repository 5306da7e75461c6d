//! The party's hot loops. For the Gaussian-likelihood models here, the per-row log-likelihood
//! ratio r_x = ℓ(x|θ′) − ℓ(x|θ) is affine in the row, r_x = c + Σ_j w_j x_j, with (w, c)
//! depending only on (θ, θ′), and so is the per-row gradient, ∇_θ ℓ(x|θ) = A x + c, with
//! (A, c) depending only on θ. So one kernel per quantity serves every such model: each model
//! derives its coefficients once per call and the kernel streams the columns.
mod lanes;

#[cfg(target_arch = "x86_64")]
use self::lanes::{Avx2, Avx512};
use self::lanes::{Lanes, MAX_LANES, Portable};
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
        return grad_blocked(cols, a, c, bound, out);
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

/// Rows per block of [`grad_blocked`]: its gradients (`dim` × this) stay in L1 and L2.
const GRAD_BLOCK: usize = 256;

/// [`clipped_affine_grad_sum`] for shapes without a register kernel (A not square, or past
/// [`GRAD_MAX_DIM`]): a block of rows at a time, column by column, so the data stream
/// contiguously and A's zero entries cost nothing (exactly: the data are finite), where a row
/// at a time gathered each row and paid for every entry of A. Each row is then clipped as
/// [`crate::clip::clip_norm`] clips it, and the rows are added in order.
fn grad_blocked(cols: &Columns, a: &[f64], c: &[f64], bound: f64, out: &mut [f64]) -> u64 {
    let (dim, n) = (c.len(), cols.n());
    let (keep, target) = (norm_sq_bound(bound), bound * NORM_CLIP_MARGIN);
    // Entry k of the block's i-th row is g[k * GRAD_BLOCK + i].
    let mut g = vec![0.0; dim * GRAD_BLOCK];
    let (mut norms, mut scale) = ([0.0; GRAD_BLOCK], [0.0; GRAD_BLOCK]);
    let mut clipped = 0;
    out.fill(0.0);
    for start in (0..n).step_by(GRAD_BLOCK) {
        let len = GRAD_BLOCK.min(n - start);
        for (gk, &ck) in g.chunks_exact_mut(GRAD_BLOCK).zip(c) {
            gk[..len].fill(ck);
        }
        for (j, column) in a.chunks_exact(dim).enumerate() {
            let x = &cols.col(j)[start..start + len];
            for (gk, &akj) in g.chunks_exact_mut(GRAD_BLOCK).zip(column) {
                if akj != 0.0 {
                    gk.iter_mut().zip(x).for_each(|(gi, xi)| *gi += akj * xi);
                }
            }
        }
        let (norms, scale) = (&mut norms[..len], &mut scale[..len]);
        norms.fill(0.0);
        for gk in g.chunks_exact(GRAD_BLOCK) {
            norms.iter_mut().zip(gk).for_each(|(s, v)| *s += v * v);
        }
        for (i, (&s, w)) in norms.iter().zip(scale.iter_mut()).enumerate() {
            *w = 1.0;
            if s <= keep {
                continue; // kept whole (a NaN norm is not)
            }
            clipped += 1;
            let norm = s.sqrt();
            if norm.is_finite() {
                *w = target / norm;
            } else {
                // Adds nothing: zeroed, as a non-finite entry times 0 would be NaN.
                g.chunks_exact_mut(GRAD_BLOCK).for_each(|gk| gk[i] = 0.0);
            }
        }
        for (o, gk) in out.iter_mut().zip(g.chunks_exact(GRAD_BLOCK)) {
            gk.iter().zip(scale.iter()).for_each(|(v, w)| *o += v * w);
        }
    }
    clipped
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
mod tests;
