use super::*;
use crate::models::{Family, GlmSpec, ModelSpec};
use crate::noise_aware::assert_gradient;

fn release() -> (Arc<dyn Model>, Release) {
    let model = ModelSpec::Glm(GlmSpec::example(Family::Logistic, 3))
        .build()
        .unwrap();
    let release = Release {
        centre: vec![0.2, -0.1, 0.4],
        g: vec![12.0, -30.0, 5.0],
        a: vec![
            vec![400.0, 20.0, -10.0],
            vec![20.0, 300.0, 15.0],
            vec![-10.0, 15.0, 350.0],
        ],
        noise_variance: 25.0,
        curvature_noise_variance: 9.0,
    };
    (model, release)
}

/// The logistic bend (`sigmoid.rs`) of `release`'s model over `rows` rows.
fn bend(model: &dyn Model, release: &Release, rows: u64) -> Bend {
    let q = quadratic(model).expect("a GLM has quadratic summaries");
    bend_of(q, release, rows).expect("a logistic GLM's score is a sigmoid's")
}

#[test]
fn the_gradient_matches_finite_differences() {
    let (model, release) = release();
    for bent in [None, Some(bend(model.as_ref(), &release, 1_600))] {
        let post = QuadraticPosterior::new(Arc::clone(&model), release.clone(), bent);
        let mut x = post.sampler_point(&post.initial(model.as_ref()));
        x[0] += 0.05;
        x[5] += 0.1;
        x[4] -= 0.3;
        assert_gradient(&post, &x, 1e-5);
        for (k, v) in x.iter_mut().enumerate() {
            *v += 0.7 * (k as f64 + 1.0).sin();
        }
        assert_gradient(&post, &x, 1e-5);
    }
}

/// The joint density on (θ, L) as the module's comment writes it, up to a constant.
/// With a bend, the score's mean is AΔ + h(θ, A).
fn centred(model: &dyn Model, release: &Release, bend: Option<&Bend>, point: &[f64]) -> f64 {
    let d = release.dim();
    let (theta, coords) = point.split_at(d);
    let l = factor::read(coords, d);
    let a = &l * l.transpose();
    let delta = DVector::from_fn(d, |i, _| theta[i] - release.centre[i]);
    let mut r = DVector::from_column_slice(&release.g) - &a * &delta;
    if let Some(bend) = bend {
        r -= bend.at(&a, &DVector::from_column_slice(theta)).0;
    }
    let chol = (&a + DMatrix::identity(d, d) * release.noise_variance)
        .cholesky()
        .unwrap();
    let half_log_det: f64 = chol.l().diagonal().iter().map(|v| v.ln()).sum();
    let measured: f64 = (0..d)
        .flat_map(|i| (i..d).map(move |j| (i, j)))
        .map(|(i, j)| (release.a[i][j] - a[(i, j)]).powi(2))
        .sum::<f64>()
        / (2.0 * release.curvature_noise_variance);
    -0.5 * r.dot(&chol.solve(&r)) - half_log_det - measured
        + model.log_prior(theta)
        + factor::log_jacobian(coords, d, MEANS_PRIOR)
}

/// The non-centred density is the joint one moved to (z, L): at every point they differ
/// by ln det R (the map's Jacobian) and a constant, so θ integrated out of the joint
/// leaves A's marginal exactly, and `reported` inverts `sampler_point`.
#[test]
fn the_non_centred_density_is_the_joint_one_reparametrised() {
    let (model, release) = release();
    for bent in [false, true] {
        let post = QuadraticPosterior::new(
            Arc::clone(&model),
            release.clone(),
            bent.then(|| bend(model.as_ref(), &release, 1_600)),
        );
        let base = post.initial(model.as_ref());
        let mut offsets = Vec::new();
        for k in 0..6 {
            let mut point = base.clone();
            for (i, p) in point.iter_mut().enumerate() {
                *p += 0.3 * ((k * 7 + i * 3) as f64).sin();
            }
            let x = post.sampler_point(&point);
            let back = post.reported(&x);
            for (a, b) in point.iter().zip(&back) {
                assert!((a - b).abs() < 1e-9, "{point:?} came back as {back:?}");
            }
            let l = factor::read(&x[3..], 3);
            let a = &l * l.transpose();
            let c = noise_covariance(&a, release.noise_variance).unwrap();
            let (_, r) = post.conditional(&a, &c).unwrap();
            let log_det_r: f64 = r.diagonal().iter().map(|v| v.ln()).sum();
            let mut grad = vec![0.0; post.dim()];
            let nc = post.log_density(&x, &mut grad);
            let joint = centred(model.as_ref(), &release, post.bend.as_ref(), &point);
            offsets.push(joint - nc - log_det_r);
        }
        for o in &offsets {
            assert!((o - offsets[0]).abs() < 1e-8, "{offsets:?}");
        }
    }
}

#[test]
fn the_plug_in_gradient_matches_finite_differences() {
    let (model, release) = release();
    let post = PlugInPosterior::new(model, &release);
    assert_gradient(&post, &[0.3, -0.2, 0.5], 1e-4);
}

#[test]
fn the_approximation_solves_the_noisy_quadratic_with_the_prior() {
    let (model, release) = release();
    let a = release.a_matrix();
    let c = &a + DMatrix::identity(3, 3) * release.noise_variance;
    let solve = |release: &Release| Approximation::of(model.as_ref(), release).mode;
    // At the mode, AC⁻¹(ĝ − AΔ) + ∇ ln p(θ) = 0 (the prior is normal, so its gradient
    // at the mode is the centre's moved by its curvature).
    let next = solve(&release);
    let delta = DVector::from_fn(3, |i, _| next[i] - release.centre[i]);
    let r = DVector::from_column_slice(&release.g) - &a * &delta;
    let score = &a * c.cholesky().unwrap().solve(&r);
    let mut prior = vec![0.0; 3];
    model.grad_log_prior(&next, &mut prior);
    for i in 0..3 {
        assert!(
            (score[i] + prior[i]).abs() < 1e-9,
            "{i}: {}",
            score[i] + prior[i]
        );
    }
    // Without noise it is the Newton step on ĝᵀΔ − ½ΔᵀÂΔ + ln p; with overwhelming
    // noise the released quadratic says nothing and the mode is the prior's.
    let exact = solve(&Release {
        noise_variance: 0.0,
        ..release.clone()
    });
    let newton = {
        let mut prior = vec![0.0; 3];
        model.grad_log_prior(&exact, &mut prior);
        let delta = DVector::from_fn(3, |i, _| exact[i] - release.centre[i]);
        DVector::from_column_slice(&release.g) - &a * &delta + DVector::from_vec(prior)
    };
    assert!(newton.norm() < 1e-9, "{newton}");
    let drowned = solve(&Release {
        noise_variance: 1e16,
        ..release.clone()
    });
    for (m, p) in drowned.iter().zip(model.prior_mode()) {
        assert!((m - p).abs() < 1e-6, "{m} vs the prior's {p}");
    }
}
