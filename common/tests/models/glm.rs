//! Generalised linear models over named, bounded columns.
use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{Family, GlmColumn, GlmSpec, Model, ModelSpec, glm_prior};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::support::{add, glm_specs, moments, naive_ratios, normals, rows};

/// Every corner of a GLM's box of admitted rows (features and label at their bounds): the
/// rows where its ratio and gradient bounds are attained, if anywhere.
fn glm_corners(model: &dyn Model) -> Columns {
    let bounds: Vec<[f64; 2]> = model
        .columns()
        .iter()
        .map(|c| c.bounds.expect("a GLM bounds every column"))
        .collect();
    let corners: Vec<Vec<f64>> = (0..1usize << bounds.len())
        .map(|mask| {
            (0..bounds.len())
                .map(|j| bounds[j][(mask >> j) & 1])
                .collect()
        })
        .collect();
    Columns::from_rows(bounds.len(), &corners).unwrap()
}

/// The model's public bounds hold on every admitted row, so a clip at them never binds: on
/// simulated rows and on the box's corners, at θ near the truth and far from it, for full,
/// one-component and long steps; and near the truth the ratio bound is attained within a
/// factor of 4 at a corner (it is not vacuous; far from the truth the largest score and the
/// longest reach x̃ᵀ(θ′ − θ) fall on different corners).
#[test]
fn glm_clips_at_the_public_bounds_never_bind() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    for spec in glm_specs() {
        let model = spec.build().unwrap();
        let (d, t) = (model.dim(), model.temperature());
        let truth = spec.true_theta();
        let simulated = model.simulate(&truth, 2000, &mut rng);
        let corners = glm_corners(&*model);
        for sd in [0.01, 0.3, 2.0] {
            let theta = add(&truth, &normals(&mut rng, d, sd));
            let mut one_component = theta.clone();
            one_component[d - 1] += sd;
            for prop in [add(&theta, &normals(&mut rng, d, sd)), one_component] {
                let bound = model.ratio_bound(&theta, &prop).unwrap();
                for data in [&simulated, &corners] {
                    let sum = model.clipped_llr_sum(data, &theta, &prop, t * bound);
                    assert_eq!(sum.clipped, 0, "{spec:?} sd {sd}");
                }
                let worst = naive_ratios(&*model, &corners, &theta, &prop)
                    .iter()
                    .fold(0.0f64, |m, r| m.max(r.abs()));
                assert!(worst <= t * bound, "{spec:?}");
                assert!(
                    sd > 0.01 || 4.0 * worst >= t * bound,
                    "{spec:?}: {worst} {bound}"
                );
            }
            let bound = model.gradient_bound(&theta).unwrap();
            for data in [&simulated, &corners] {
                let mut g = vec![0.0; d];
                assert_eq!(
                    model.clipped_grad_sum(data, &theta, t * bound, &mut g),
                    0,
                    "{spec:?} sd {sd}"
                );
            }
        }
    }
}

/// At θ so large that a predictor's range is not a number (features within [2, 3], so
/// θ = (−f64::MAX, f64::MAX) makes it −∞ + ∞), a GLM of any family claims no bound (∞), so
/// a party keeps the run's clip instead of trusting a meaningless one.
#[test]
fn glm_bounds_at_absurd_theta_defer_to_the_run_clip() {
    for family in [Family::Gaussian, Family::Logistic, Family::Poisson] {
        let mut spec = GlmSpec::example(family, 3);
        spec.intercept = false;
        spec.true_theta = None;
        for feature in &mut spec.features {
            feature.bounds = Some([2.0, 3.0]);
        }
        let model = ModelSpec::Glm(spec).build().unwrap();
        let theta = [-f64::MAX, f64::MAX];
        let far = model.ratio_bound(&theta, &[0.0, 0.0]);
        assert_eq!(far, Some(f64::INFINITY), "{family:?}");
        assert_eq!(
            model.gradient_bound(&theta),
            Some(f64::INFINITY),
            "{family:?}"
        );
    }
}

/// A logistic GLM's ratio is Lipschitz everywhere: its bound never exceeds max‖x̃‖·‖θ′ − θ‖.
#[test]
fn logistic_ratio_bound_is_within_the_feature_norm() {
    let spec = GlmSpec::example(Family::Logistic, 3);
    let model = ModelSpec::Glm(spec).build().unwrap();
    let max_norm = (1.0f64 + 4.0 + 4.0).sqrt();
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    for sd in [0.1, 10.0, 1e3] {
        let theta = normals(&mut rng, 3, sd);
        let prop = add(&theta, &normals(&mut rng, 3, sd));
        let distance = fedmcmc_common::clip::distance(&theta, &prop);
        let bound = model.ratio_bound(&theta, &prop).unwrap();
        assert!(bound <= max_norm * distance * (1.0 + 1e-9), "{bound}");
        assert!(model.gradient_bound(&theta).unwrap() <= max_norm * (1.0 + 1e-9));
    }
}

#[test]
fn glm_simulation_stays_within_the_bounds_and_follows_the_family() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    for spec in glm_specs() {
        let ModelSpec::Glm(glm) = &spec else {
            unreachable!()
        };
        let model = spec.build().unwrap();
        let truth = spec.true_theta();
        let data = model.simulate(&truth, 40_000, &mut rng);
        for (j, column) in model.columns().iter().enumerate() {
            let [lo, hi] = column.bounds.unwrap();
            assert!(
                data.col(j).iter().all(|v| (lo..=hi).contains(v)),
                "{spec:?}"
            );
        }
        // The label's residual from its mean given η has mean 0 (and, for the gaussian
        // family, the noise sd).
        let residuals: Vec<f64> = rows(&data)
            .iter()
            .map(|x| {
                let p = x.len() - 1;
                let eta: f64 = (if glm.intercept { truth[0] } else { 0.0 })
                    + truth[usize::from(glm.intercept)..]
                        .iter()
                        .zip(&x[..p])
                        .map(|(t, v)| t * v)
                        .sum::<f64>();
                let mean = match glm.family {
                    Family::Gaussian => eta,
                    Family::Logistic => 1.0 / (1.0 + (-eta).exp()),
                    Family::Poisson => eta.exp(),
                };
                x[p] - mean
            })
            .collect();
        let (mean, sd, se_mean, se_sd) = moments(&residuals);
        assert!(mean.abs() < 4.0 * se_mean, "{spec:?}: residual mean {mean}");
        if let Some(noise) = glm.noise_sd {
            assert!(
                (sd - noise).abs() < 4.0 * se_sd,
                "{spec:?}: residual sd {sd}"
            );
        }
    }
}

#[test]
fn glm_columns_and_fingerprint_follow_the_configuration() {
    let base = GlmSpec::example(Family::Poisson, 3);
    let model = ModelSpec::Glm(base.clone()).build().unwrap();
    let columns: Vec<(String, Option<[f64; 2]>)> = model
        .columns()
        .into_iter()
        .map(|c| (c.name, c.bounds))
        .collect();
    assert_eq!(
        columns,
        [
            ("feature1".to_string(), Some([-1.0, 1.0])),
            ("feature2".to_string(), Some([-1.0, 1.0])),
            ("label".to_string(), Some([0.0, 100.0])),
        ]
    );
    assert_eq!((model.dim(), model.row_dim()), (3, 3));
    let fp = |f: &dyn Fn(&mut GlmSpec)| {
        let mut s = base.clone();
        f(&mut s);
        ModelSpec::Glm(s).build().unwrap().fingerprint()
    };
    let same = fp(&|_| ());
    assert_eq!(same, fp(&|s| s.prior_sd = vec![1.0, 2.0, 3.0]));
    assert_eq!(same, fp(&|s| s.true_theta = None));
    for changed in [
        fp(&|s| {
            s.family = Family::Logistic;
            s.label.bounds = Some([0.0, 1.0]);
        }),
        fp(&|s| s.features[1].name = "dose".into()),
        fp(&|s| s.features[0].bounds = Some([-1.0, 2.0])),
        fp(&|s| s.label.bounds = Some([0.0, 50.0])),
        fp(&|s| s.label.name = "count".into()),
        fp(&|s| {
            s.intercept = false;
            s.prior_sd = vec![10.0];
            s.true_theta = None;
        }),
        fp(&|s| s.temperature = 0.5),
    ] {
        assert_ne!(same, changed);
    }
    let gaussian = |sd: f64| {
        ModelSpec::Glm(GlmSpec {
            noise_sd: Some(sd),
            ..GlmSpec::example(Family::Gaussian, 3)
        })
        .build()
        .unwrap()
        .fingerprint()
    };
    assert_ne!(gaussian(1.0), gaussian(2.0));
}

#[test]
fn glm_specs_deserialise_and_are_validated_clearly() {
    let spec: ModelSpec = serde_json::from_str(
        r#"{"kind": "glm", "family": "logistic", "label": {"name": "outcome"},
            "features": [{"name": "age", "bounds": [18, 90]}], "prior_sd": [10.0]}"#,
    )
    .unwrap();
    let ModelSpec::Glm(glm) = &spec else { panic!() };
    assert!(glm.intercept && glm.temperature == 1.0 && glm.noise_sd.is_none());
    assert_eq!(spec.build().unwrap().dim(), 2);
    // Without prior_sd the logistic family takes the weakly informative prior of its bounds.
    let bare: ModelSpec = serde_json::from_str(
        r#"{"kind": "glm", "family": "logistic", "label": {"name": "outcome"},
            "features": [{"name": "age", "bounds": [18, 90]}]}"#,
    )
    .unwrap();
    let ModelSpec::Glm(mut explicit) = bare.clone() else {
        panic!()
    };
    explicit.prior_sd = glm_prior::weakly_informative_sd(true, &[[18.0, 90.0]]);
    let (bare, explicit) = (
        bare.build().unwrap(),
        ModelSpec::Glm(explicit).build().unwrap(),
    );
    for theta in [[0.0, 0.0], [1.5, -0.2], [-7.0, 0.4]] {
        assert_eq!(bare.log_prior(&theta), explicit.log_prior(&theta));
    }
    assert_ne!(
        bare.log_prior(&[1.0, 0.1]),
        spec.build().unwrap().log_prior(&[1.0, 0.1])
    );
    for s in glm_specs() {
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), s);
    }
    let error = |f: &dyn Fn(&mut GlmSpec)| {
        let mut s = GlmSpec::example(Family::Gaussian, 3);
        f(&mut s);
        ModelSpec::Glm(s).build().unwrap_err().to_string()
    };
    type Case<'a> = (&'a dyn Fn(&mut GlmSpec), &'a str);
    let cases: [Case; 12] = [
        (
            &|s| s.features[1].name = "feature1".into(),
            "column feature1 is named twice",
        ),
        (
            &|s| s.label.name = "feature2".into(),
            "column feature2 is named twice",
        ),
        (
            &|s| s.features[0].name = "1st; DROP".into(),
            "column name \"1st; DROP\" is not a plain identifier",
        ),
        (
            &|s| s.features[0].bounds = Some([2.0, 2.0]),
            "column feature1: bounds [2, 2] must be finite with lo < hi",
        ),
        (
            &|s| s.features[1].bounds = Some([0.0, f64::INFINITY]),
            "column feature2: bounds [0, inf] must be finite with lo < hi",
        ),
        (
            &|s| s.features[0].bounds = None,
            "column feature1 needs public bounds = [lo, hi]",
        ),
        (
            &|s| s.label.bounds = None,
            "column label needs public bounds = [lo, hi]",
        ),
        (
            &|s| s.noise_sd = None,
            "the gaussian family: noise_sd is required",
        ),
        (
            &|s| s.features.clear(),
            "the glm (features) model needs dimension at least 1, got 0",
        ),
        (
            &|s| s.prior_sd = vec![1.0, 1.0],
            "prior_sd has length 2, expected 3",
        ),
        (
            &|s| s.noise_sd = Some(0.0),
            "noise_sd must be positive and finite, got 0",
        ),
        (
            &|s| s.prior_sd.clear(),
            "the gaussian family: prior_sd is required",
        ),
    ];
    for (change, message) in cases {
        let got = error(change);
        assert!(got.starts_with(message), "{got}");
    }
    let family = |family: Family, label: Option<[f64; 2]>, noise_sd: Option<f64>| {
        let mut s = GlmSpec::example(family, 2);
        s.label = GlmColumn::new("y", label);
        s.noise_sd = noise_sd;
        ModelSpec::Glm(s)
            .build()
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        family(Family::Logistic, Some([0.0, 2.0]), None),
        Err("the logistic family: the label's bounds must lie within [0, 1]".into())
    );
    assert_eq!(
        family(Family::Logistic, None, Some(1.0)),
        Err("the logistic family: noise_sd applies to the gaussian family only".into())
    );
    assert_eq!(
        family(Family::Poisson, Some([-1.0, 5.0]), None),
        Err("the poisson family: the label is a count: its lower bound must be ≥ 0".into())
    );
    assert_eq!(family(Family::Poisson, Some([0.0, 5.0]), None), Ok(()));
}

/// The gaussian GLM's sufficient statistics (Yıldırım & Ermiş 2019, Alg. 3): ⟨S, φ(θ′) − φ(θ)⟩
/// is the tempered log-likelihood ratio over the rows, each row's ‖T·s(x)‖ is within the
/// public row bound (attained at a corner of the box), and the noisy ratio's variance is
/// eq. 8's σ²‖φ(θ′) − φ(θ)‖². The other families have none.
#[test]
fn gaussian_glm_sufficient_statistics_give_the_ratio() {
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    for spec in glm_specs() {
        let model = spec.build().unwrap();
        let Some(family) = model.sufficient_statistics() else {
            assert!(!matches!(&spec, ModelSpec::Glm(g) if g.family == Family::Gaussian));
            continue;
        };
        let d = model.dim();
        let data = model.simulate(&spec.true_theta(), 500, &mut rng);
        let stats = family.sum(&data);
        assert_eq!(stats.len(), family.entries());
        for _ in 0..5 {
            let theta = add(&spec.true_theta(), &normals(&mut rng, d, 0.5));
            let prop = add(&theta, &normals(&mut rng, d, 0.5));
            let naive: f64 = naive_ratios(&*model, &data, &theta, &prop).iter().sum();
            let (ratio, variance) =
                fedmcmc_common::models::noisy_log_lik_ratio(family, &stats, 2.0, &theta, &prop);
            assert!(
                (ratio - naive).abs() <= 1e-9 * naive.abs().max(1.0),
                "{ratio} vs {naive}"
            );
            let c = family.ratio_coefficients(&theta, &prop);
            assert_eq!(variance, 2.0 * c.iter().map(|c| c * c).sum::<f64>());
        }
        let corners = glm_corners(&*model);
        let norms: Vec<f64> = rows(&corners)
            .iter()
            .map(|x| {
                let one = Columns::from_rows(x.len(), &[x]).unwrap();
                family.sum(&one).iter().map(|v| v * v).sum::<f64>().sqrt()
            })
            .collect();
        let largest = norms.iter().fold(0.0f64, |m, v| m.max(*v));
        let bound = family.row_bound();
        assert!(
            largest <= bound * (1.0 + 1e-12) && largest >= bound * (1.0 - 1e-12),
            "{largest} vs {bound}"
        );
    }
}
