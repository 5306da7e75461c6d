//! Gradients against central differences, and the clipped gradient sum against the
//! row-by-row default, non-finite rows included.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{Model, ModelSpec, clipped_grad_sum_by_rows};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::support::{add, every_spec, normals, rows};

#[test]
fn gradients_match_central_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let h = 1e-5;
    for spec in every_spec() {
        let model = spec.build().unwrap();
        let d = model.dim();
        let data = model.simulate(&spec.true_theta(), 3, &mut rng);
        for _ in 0..3 {
            let theta = add(&spec.true_theta(), &normals(&mut rng, d, 0.5));
            let fd = |f: &dyn Fn(&[f64]) -> f64, k: usize| {
                let (mut up, mut down) = (theta.clone(), theta.clone());
                up[k] += h;
                down[k] -= h;
                (f(&up) - f(&down)) / (2.0 * h)
            };
            let mut g = vec![f64::NAN; d];
            model.grad_log_prior(&theta, &mut g);
            for (k, gk) in g.iter().enumerate() {
                let num = fd(&|t| model.log_prior(t), k);
                assert!(
                    (num - gk).abs() <= 1e-6 * (1.0 + gk.abs()),
                    "{spec:?} prior {k}: {num} vs {gk}"
                );
            }
            for x in rows(&data) {
                model.grad_log_lik_row(&theta, &x, &mut g);
                for (k, gk) in g.iter().enumerate() {
                    let num = fd(&|t| model.log_lik_row(t, &x), k);
                    assert!(
                        (num - gk).abs() <= 1e-6 * (1.0 + gk.abs()),
                        "{spec:?} lik {k}: {num} vs {gk}"
                    );
                }
            }
        }
    }
}

/// Every model, and the dimensions the affine gradient kernel treats apart: one, past its
/// register kernels, in between.
fn gradient_specs() -> Vec<ModelSpec> {
    let mut specs = every_spec();
    specs.push(ModelSpec::gaussian(vec![vec![0.7]], 10.0));
    specs.push(ModelSpec::flat_banana(5));
    specs.push(ModelSpec::tempered_banana(9, 1000));
    specs
}

/// Each row's tempered gradient norm ‖∇_θ T·ℓ(x|θ)‖.
fn gradient_norms(model: &dyn Model, data: &Columns, theta: &[f64]) -> Vec<f64> {
    let mut g = vec![0.0; model.dim()];
    rows(data)
        .iter()
        .map(|x| {
            model.grad_log_lik_row(theta, x, &mut g);
            g.iter().map(|v| v * v).sum::<f64>().sqrt()
        })
        .collect()
}

/// `got` within a relative 1e-12 of `expect`, relative to Σ_x ‖clip_b(g_x)‖: the sum's terms
/// cancel, so relative to the sum itself would ask more than either order of summation gives.
fn assert_close(got: &[f64], expect: &[f64], norms: &[f64], bound: f64, what: &str) {
    let scale: f64 = norms.iter().map(|v| v.min(bound)).sum();
    for (g, e) in got.iter().zip(expect) {
        assert!(
            (g - e).abs() <= 1e-12 * scale,
            "{what}: {got:?} vs {expect:?}"
        );
    }
}

#[test]
fn clipped_gradient_sum_equals_the_row_by_row_default() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for spec in gradient_specs() {
        let model = spec.build().unwrap();
        let d = model.dim();
        let truth = spec.true_theta();
        // Rows enough for several blocks and a partial last group; and fewer than a group.
        for n in [3001, 5] {
            let data = model.simulate(&truth, n, &mut rng);
            let near = add(&truth, &normals(&mut rng, d, 0.05));
            let far = add(&truth, &normals(&mut rng, d, 1.0));
            for theta in [truth.clone(), near, far] {
                let norms = gradient_norms(&*model, &data, &theta);
                let mut sorted = norms.clone();
                sorted.sort_by(f64::total_cmp);
                // Binds for about half the rows (halfway between two rows' norms, so that
                // rounding cannot move a row across it); for none; for every row.
                let half = 0.5 * (sorted[n / 2] + sorted[n / 2 + 1]);
                for bound in [half, 2.0 * sorted[n - 1], 0.0] {
                    let what = format!("{spec:?} n {n} θ {theta:?} bound {bound}");
                    let (mut got, mut expect) = (vec![f64::NAN; d], vec![f64::NAN; d]);
                    let clipped = model.clipped_grad_sum(&data, &theta, bound, &mut got);
                    let expect_clipped =
                        clipped_grad_sum_by_rows(&*model, &data, &theta, bound, &mut expect);
                    assert_eq!(clipped, expect_clipped, "{what}");
                    assert_close(&got, &expect, &norms, bound, &what);
                    let norm = got.iter().map(|v| v * v).sum::<f64>().sqrt();
                    assert!(norm <= n as f64 * bound * (1.0 + 1e-12), "{what}: {norm}");
                    let expect_count = match bound {
                        0.0 => n as u64,
                        b if b == half => (n - n / 2 - 1) as u64,
                        _ => 0,
                    };
                    assert_eq!(clipped, expect_count, "{what}");
                }
            }
        }
    }
}

/// A row whose tempered gradient is ∞ or NaN, or whose squared norm overflows, adds nothing
/// and counts as clipped whatever the bound, in each model's override as in the default: rows
/// at ±f64::MAX and 1e300 among ordinary ones, and an extreme θ where every row's is.
#[test]
fn non_finite_gradients_add_nothing_and_count_as_clipped() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    for spec in gradient_specs() {
        let model = spec.build().unwrap();
        let (d, theta) = (model.dim(), spec.true_theta());
        let ordinary = model.simulate(&theta, 37, &mut rng);
        let extreme = [
            vec![f64::MAX; model.row_dim()],
            (0..model.row_dim())
                .map(|j| if j % 2 == 0 { f64::MAX } else { -f64::MAX })
                .collect(),
            vec![1e300; model.row_dim()],
        ];
        let mut mixed = rows(&ordinary);
        for (i, x) in extreme.iter().enumerate() {
            mixed.insert(10 * i + 3, x.clone());
        }
        let mixed = Columns::from_rows(model.row_dim(), &mixed).unwrap();
        let norms = gradient_norms(&*model, &ordinary, &theta);
        for bound in [0.5, 1e6] {
            let what = format!("{spec:?} bound {bound}");
            let (mut plain, mut got, mut by_rows) = (vec![0.0; d], vec![0.0; d], vec![0.0; d]);
            let plain_clipped = model.clipped_grad_sum(&ordinary, &theta, bound, &mut plain);
            let clipped = model.clipped_grad_sum(&mixed, &theta, bound, &mut got);
            let by_rows_clipped =
                clipped_grad_sum_by_rows(&*model, &mixed, &theta, bound, &mut by_rows);
            assert_eq!(clipped, plain_clipped + 3, "{what}");
            assert_eq!(by_rows_clipped, clipped, "{what}");
            assert_close(&got, &plain, &norms, bound, &what);
            assert_close(&by_rows, &plain, &norms, bound, &what);
            if bound == 1e6 {
                assert_eq!(plain_clipped, 0, "{what}");
            }
        }
        // A GLM row's score may stay finite at any θ: a logistic one always, a poisson one
        // where e^η underflows.
        if matches!(&spec, ModelSpec::Glm(_)) {
            continue;
        }
        let mut got = vec![f64::NAN; d];
        let far = vec![1e200; d];
        assert_eq!(
            model.clipped_grad_sum(&ordinary, &far, 1.0, &mut got),
            37,
            "{spec:?}"
        );
        assert!(got.iter().all(|v| *v == 0.0), "{spec:?}: {got:?}");
    }
}
