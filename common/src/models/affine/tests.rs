use super::*;
use crate::models::sum_clipped_rows;

/// One row's A x + c into `g`, `a` column by column as in [`clipped_affine_grad_sum`].
fn affine_grad_row(a: &[f64], c: &[f64], x: &[f64], g: &mut [f64]) {
    g.copy_from_slice(c);
    for (column, &xj) in a.chunks_exact(c.len()).zip(x) {
        for (gk, akj) in g.iter_mut().zip(column) {
            *gk += akj * xj;
        }
    }
}

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
                    .map(|i| (i as f64 * (0.37 + 0.1 * j as f64)).sin() * (1.0 + (i % 97) as f64))
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

/// Every copy of the register kernel, the blocked kernel, and the dispatch (the blocked
/// kernel past [`GRAD_MAX_DIM`]), against the plain loop: across many registers with a
/// partial last one, and with only a partial register; some zero entries of A; at a bound that binds
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
        let mut runs: Vec<(&str, GradFn)> = vec![
            ("dispatch", clipped_affine_grad_sum),
            ("blocked", grad_blocked),
        ];
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

/// A not square (more parameters than columns, and fewer): the dispatch runs the blocked
/// kernel, against the plain loop, over several blocks and at a bound that clips some rows.
#[test]
fn non_square_gradients_match_the_plain_loop() {
    for (dim, d) in [(3, 5), (5, 2)] {
        let cols = wavy(3 * GRAD_BLOCK + 7, d);
        let a: Vec<f64> = (0..dim * d).map(|i| 0.2 * (i as f64 - 2.0).sin()).collect();
        let c: Vec<f64> = (0..dim).map(|k| 0.1 * k as f64).collect();
        let (expect, expect_clipped) = by_rows(&cols, &a, &c, 3.0);
        let mut got = vec![0.0; dim];
        let clipped = clipped_affine_grad_sum(&cols, &a, &c, 3.0, &mut got);
        assert_eq!(clipped, expect_clipped, "dim {dim}, d {d}");
        assert!(
            clipped > 0 && clipped < cols.n() as u64,
            "dim {dim}, d {d}: {clipped}"
        );
        for (g, e) in got.iter().zip(&expect) {
            assert!((g - e).abs() <= 1e-12 * cols.n() as f64 * 3.0, "{g} vs {e}");
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
/// the bound; the other rows are untouched. In every copy of the kernel and the blocked one,
/// on nine rows and on them three times over (so in full registers as well as in the last,
/// padded one).
#[test]
fn non_finite_gradients_add_nothing() {
    let nine = [
        [1.0, -1.0, 0.0, 1e300, 2.0, 0.5, -0.25, 1.0, 0.0],
        [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
    ];
    for times in [1, 3] {
        let cols = Columns::from_columns(nine.map(|x| x.repeat(times)).to_vec()).unwrap();
        let (n, r) = (cols.n() as u64, times as f64);
        for ((name, run), bound) in copies()
            .into_iter()
            .map(|(name, _, grad)| (name, grad))
            .chain([("blocked", grad_blocked as GradFn)])
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
