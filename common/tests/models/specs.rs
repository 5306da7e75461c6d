//! Specs: the thesis's presets, fingerprints, deserialisation with defaults, clear refusals
//! of invalid specs, and built models as shareable trait objects.
use std::sync::Arc;

use fedmcmc_common::models::{BananaSpec, CircleSpec, GaussianSpec, Model, ModelError, ModelSpec};

use crate::support::{all_specs, correlated_gaussian, odd_banana, odd_circle, odd_gaussian};

#[test]
fn presets_follow_the_thesis() {
    let ModelSpec::Banana(flat) = ModelSpec::flat_banana(4) else {
        panic!()
    };
    assert_eq!(
        (flat.a, flat.b, flat.m, flat.prior_var, flat.temperature),
        (20.0, 0.0, 0.0, 1000.0, 1.0)
    );
    assert_eq!(flat.lik_var, vec![20.0, 2.5, 1.0, 1.0]);
    assert_eq!(
        ModelSpec::flat_banana(4).true_theta(),
        vec![0.0, 3.0, 0.0, 0.0]
    );
    let ModelSpec::Banana(tempered) = ModelSpec::tempered_banana(2, 100_000) else {
        panic!()
    };
    assert_eq!(tempered.temperature, 0.01);
    assert_eq!(odd_banana().true_theta(), vec![0.2, 1.0, -0.5]);
    let circle = ModelSpec::Circle(CircleSpec::thesis());
    let ModelSpec::Circle(c) = &circle else {
        panic!()
    };
    assert_eq!((c.a, c.temperature), (1e-5, 1.0));
    assert_eq!(circle.true_theta(), vec![0.0, 3.0]);
}

#[test]
fn fingerprint_tracks_likelihood_hyperparameters_only() {
    let fp = |spec: ModelSpec| spec.build().unwrap().fingerprint();
    let base = fp(ModelSpec::flat_banana(2));
    // Golden value: changing it breaks agreement between parties and coordinators of
    // different builds, so it must only change deliberately.
    assert_eq!(base, "7e7ddfa37db4fbfc");
    assert_eq!(base, fp(ModelSpec::flat_banana(2)));
    let ModelSpec::Banana(flat) = ModelSpec::flat_banana(2) else {
        panic!()
    };
    let with = |f: &dyn Fn(&mut BananaSpec)| {
        let mut s = flat.clone();
        f(&mut s);
        fp(ModelSpec::Banana(s))
    };
    assert_eq!(base, with(&|s| s.prior_var = 1.0));
    assert_eq!(base, with(&|s| s.true_theta = Some(vec![1.0, 1.0])));
    for changed in [
        with(&|s| s.a = 21.0),
        with(&|s| s.b = 1.0),
        with(&|s| s.m = 1.0),
        with(&|s| s.lik_var[1] = 2.0),
        with(&|s| s.temperature = 0.5),
        fp(ModelSpec::flat_banana(3)),
        fp(correlated_gaussian()),
    ] {
        assert_ne!(base, changed);
    }
    assert_eq!(fp(correlated_gaussian()).len(), 16);
}

#[test]
fn specs_deserialise_with_defaults() {
    let spec: ModelSpec = serde_json::from_str(
        r#"{"kind": "banana", "a": 20.0, "lik_var": [20.0, 2.5], "prior_var": 1000.0}"#,
    )
    .unwrap();
    assert_eq!(spec, ModelSpec::flat_banana(2));
    let spec: ModelSpec = serde_json::from_str(
        r#"{"kind": "gaussian", "cov": [[1.0, 0.999], [0.999, 1.0]], "prior_var": 100.0}"#,
    )
    .unwrap();
    assert_eq!(spec, correlated_gaussian());
    let spec: ModelSpec = serde_json::from_str(r#"{"kind": "circle", "a": 1e-5}"#).unwrap();
    assert_eq!(spec, ModelSpec::Circle(CircleSpec::thesis()));
    for spec in [odd_banana(), odd_gaussian(), odd_circle()] {
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), spec);
    }
    let err = |s: &str| {
        serde_json::from_str::<ModelSpec>(s)
            .unwrap_err()
            .to_string()
    };
    assert!(err(r#"{"kind": "torus"}"#).contains("unknown variant"));
    assert!(err(r#"{"kind": "circle"}"#).contains("missing field"));
    assert!(
        err(r#"{"kind": "banana", "a": 1, "lik_var": [1, 1], "prior_var": 1, "sigma0": 1}"#)
            .contains("unknown field")
    );
}

#[test]
fn invalid_specs_are_rejected_clearly() {
    let banana = |f: &dyn Fn(&mut BananaSpec)| {
        let mut s = BananaSpec::flat(2);
        f(&mut s);
        ModelSpec::Banana(s).build().unwrap_err()
    };
    assert_eq!(
        banana(&|s| s.lik_var[1] = -1.0),
        ModelError::NotPositive {
            field: "lik_var",
            value: -1.0
        }
    );
    assert_eq!(
        banana(&|s| s.prior_var = 0.0),
        ModelError::NotPositive {
            field: "prior_var",
            value: 0.0
        }
    );
    assert_eq!(
        banana(&|s| s.temperature = 0.0),
        ModelError::NotPositive {
            field: "temperature",
            value: 0.0
        }
    );
    assert!(matches!(
        banana(&|s| s.temperature = f64::INFINITY),
        ModelError::NotPositive { .. }
    ));
    assert!(matches!(
        banana(&|s| s.a = f64::NAN),
        ModelError::NotFinite { field: "a", .. }
    ));
    assert_eq!(
        banana(&|s| s.lik_var = vec![1.0]),
        ModelError::TooFewDimensions {
            model: "banana",
            min: 2,
            got: 1
        }
    );
    assert_eq!(
        banana(&|s| s.true_theta = Some(vec![0.0; 3])),
        ModelError::LengthMismatch {
            field: "true_theta",
            expected: 2,
            got: 3
        }
    );

    let gaussian = |cov: Vec<Vec<f64>>, f: &dyn Fn(&mut GaussianSpec)| {
        let ModelSpec::Gaussian(mut s) = ModelSpec::gaussian(cov, 1.0) else {
            unreachable!()
        };
        f(&mut s);
        ModelSpec::Gaussian(s).build().unwrap_err()
    };
    let good = vec![vec![1.0, 0.5], vec![0.5, 1.0]];
    assert_eq!(
        gaussian(vec![vec![1.0, 2.0], vec![2.0, 1.0]], &|_| ()),
        ModelError::NotPositiveDefinite
    );
    assert_eq!(
        gaussian(vec![vec![1.0, 0.5], vec![0.4, 1.0]], &|_| ()).to_string(),
        "cov must be symmetric: cov[1][0] = 0.4 but cov[0][1] = 0.5"
    );
    assert_eq!(
        gaussian(vec![vec![1.0, 0.5], vec![0.5]], &|_| ()),
        ModelError::LengthMismatch {
            field: "cov row",
            expected: 2,
            got: 1
        }
    );
    assert_eq!(
        gaussian(good.clone(), &|s| s.prior_mean = Some(vec![0.0])),
        ModelError::LengthMismatch {
            field: "prior_mean",
            expected: 2,
            got: 1
        }
    );
    assert_eq!(
        gaussian(good, &|s| s.prior_var = -2.0).to_string(),
        "prior_var must be positive and finite, got -2"
    );
    assert_eq!(
        gaussian(vec![], &|_| ()),
        ModelError::TooFewDimensions {
            model: "gaussian",
            min: 1,
            got: 0
        }
    );
}

#[test]
fn models_are_shareable_trait_objects() {
    let models: Vec<Arc<dyn Model>> = all_specs().iter().map(|s| s.build().unwrap()).collect();
    let names: Vec<&str> = models.iter().map(|m| m.name()).collect();
    assert_eq!(
        names,
        [
            "banana", "banana", "gaussian", "gaussian", "circle", "circle"
        ]
    );
    assert_eq!(
        models
            .iter()
            .map(|m| (m.dim(), m.row_dim()))
            .collect::<Vec<_>>(),
        [(2, 2), (3, 3), (3, 3), (2, 2), (2, 1), (2, 1)]
    );
    let handle = std::thread::spawn({
        let m = Arc::clone(&models[0]);
        move || m.log_prior(&[0.0, 3.0])
    });
    assert!(handle.join().unwrap().is_finite());
}
