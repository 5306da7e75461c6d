//! `coordinator privacy …` run as a process: its JSON must agree with the library, and bad
//! input must give one sentence on stderr, nothing on stdout and a non-zero exit.
use std::process::{Command, Output};

use fedmcmc_common::accountant::{
    Accountant, Choice, Composition, GaussianComposition, MechanismKind, Method, Release,
    calibrate, max_releases,
};
use fedmcmc_common::neighbours::Neighbours;
use serde_json::Value;

fn coordinator(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .args(args)
        .output()
        .expect("run the coordinator binary")
}

fn json(args: &[&str]) -> Value {
    let out = coordinator(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "one JSON object per run: {stdout}"
    );
    serde_json::from_str(&stdout).unwrap()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

#[test]
fn epsilon_and_delta_agree_with_the_library() {
    for accountant in Accountant::ALL {
        let v = json(&[
            "privacy",
            "epsilon",
            "--noise-multiplier",
            "20",
            "--releases",
            "300",
            "--delta",
            "1e-6",
            "--accountant",
            accountant.key(),
        ]);
        let c = GaussianComposition::from_releases(&[(300.0, 20.0)]).unwrap();
        assert_eq!(num(&v, "epsilon"), accountant.epsilon(&c, 1e-6).unwrap());
        assert_eq!(num(&v, "delta"), 1e-6);
        assert_eq!(v["method"], accountant.name());

        let v = json(&[
            "privacy",
            "delta",
            "--noise-multiplier",
            "20",
            "--releases",
            "300",
            "--epsilon",
            "2",
            "--accountant",
            accountant.key(),
        ]);
        assert_eq!(num(&v, "delta"), accountant.delta(&c, 2.0).unwrap());
        assert_eq!(num(&v, "epsilon"), 2.0);
        assert_eq!(v["method"], accountant.name());
    }
}

#[test]
fn max_iterations_in_the_thesis_parametrisation() {
    // s = τ√N with τ = 0.1, N = 100 000 (Räisä 2020, Sec. 6.1), δ = 0.1/N.
    let v = json(&[
        "privacy",
        "max-iterations",
        "--tau",
        "0.1",
        "--rows",
        "100000",
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
    ]);
    let s = 0.1 * 100_000f64.sqrt();
    assert_eq!(num(&v, "noise_multiplier"), s);
    let k = max_releases(Accountant::Analytic, s, 1.0, 1e-6).unwrap();
    assert_eq!(v["releases"].as_u64(), Some(k));
    assert_eq!(k, 56);
    assert!(num(&v, "delta_at_releases") <= 1e-6 && 1e-6 < num(&v, "delta_at_next"));
    assert_eq!(v["method"], Accountant::Analytic.name());

    let z = json(&[
        "privacy",
        "max-iterations",
        "--noise-multiplier",
        &s.to_string(),
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--accountant",
        "zcdp",
    ]);
    assert_eq!(z["releases"].as_u64(), Some(34));
}

#[test]
fn calibrate_agrees_with_the_library() {
    let v = json(&[
        "privacy",
        "calibrate",
        "--releases",
        "1000",
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--rows",
        "100000",
    ]);
    let s = calibrate(Accountant::Analytic, 1000, 1.0, 1e-6).unwrap();
    assert_eq!(num(&v, "noise_multiplier"), s);
    assert_eq!(num(&v, "tau"), s / 100_000f64.sqrt());
    // The calibrated noise fits exactly the requested count.
    let k = json(&[
        "privacy",
        "max-iterations",
        "--noise-multiplier",
        &s.to_string(),
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
    ]);
    assert_eq!(k["releases"].as_u64(), Some(1000));
}

#[test]
fn bad_input_is_refused_with_one_sentence() {
    let cases: [&[&str]; 6] = [
        &[
            "privacy",
            "epsilon",
            "--noise-multiplier",
            "2",
            "--releases",
            "10",
            "--delta",
            "1.5",
        ],
        &[
            "privacy",
            "delta",
            "--noise-multiplier",
            "-2",
            "--releases",
            "10",
            "--epsilon",
            "1",
        ],
        &[
            "privacy",
            "calibrate",
            "--releases",
            "0",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
        ],
        &[
            "privacy",
            "max-iterations",
            "--tau",
            "0.1",
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
        ],
        &[
            "privacy",
            "epsilon",
            "--noise-multiplier",
            "2",
            "--tau",
            "0.1",
            "--rows",
            "9",
            "--releases",
            "1",
            "--delta",
            "0.1",
        ],
        &[
            "privacy",
            "epsilon",
            "--noise-multiplier",
            "2",
            "--releases",
            "1",
            "--delta",
            "0.1",
            "--accountant",
            "renyi",
        ],
    ];
    for args in cases {
        let out = coordinator(args);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            out.stdout.is_empty(),
            "{args:?} printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
    let out = coordinator(&[
        "privacy",
        "epsilon",
        "--noise-multiplier",
        "2",
        "--releases",
        "10",
        "--delta",
        "1.5",
    ]);
    assert_eq!(
        String::from_utf8(out.stderr).unwrap().trim_end(),
        "error: delta must lie strictly between 0 and 1, got 1.5"
    );
}

fn poisson(s: f64, q: f64, count: f64) -> Release {
    Release {
        mechanism: MechanismKind::PoissonGaussian { sampling_rate: q },
        noise_multiplier: s,
        count,
    }
}

#[test]
fn poisson_gaussian_with_pld_and_rdp() {
    let c = Composition::new(vec![poisson(1.0, 0.01, 1000.0)], Neighbours::AddRemove).unwrap();
    for m in [Method::Pld, Method::Rdp] {
        let v = json(&[
            "privacy",
            "epsilon",
            "--mechanism",
            "poisson-gaussian",
            "--sampling-rate",
            "0.01",
            "--noise-multiplier",
            "1",
            "--releases",
            "1000",
            "--delta",
            "1e-5",
            "--neighbours",
            "add-remove",
            "--accountant",
            m.key(),
        ]);
        let want = Choice::Only(m).epsilon(&c, 1e-5).unwrap().estimate;
        assert_eq!(num(&v, "epsilon"), want.value);
        assert_eq!(v["accountant"], m.key());
        assert_eq!(v["method"], m.name());
        assert_eq!(v["error"]["statement"], want.error.to_string());
        assert!(v.get("candidates").is_none() && v.get("mu").is_none());
    }
    let v = json(&[
        "privacy",
        "max-iterations",
        "--mechanism",
        "poisson-gaussian",
        "--sampling-rate",
        "0.01",
        "--noise-multiplier",
        "1",
        "--epsilon",
        "2",
        "--delta",
        "1e-5",
        "--neighbours",
        "add-remove",
        "--accountant",
        "pld",
    ]);
    let k = v["releases"].as_u64().unwrap();
    assert!(num(&v, "delta_at_releases") <= 1e-5 && 1e-5 < num(&v, "delta_at_next"));
    let at_k = Composition::new(vec![poisson(1.0, 0.01, k as f64)], Neighbours::AddRemove).unwrap();
    let d = Choice::Only(Method::Pld)
        .delta(&at_k, 2.0)
        .unwrap()
        .estimate
        .value;
    assert_eq!(d, num(&v, "delta_at_releases"));
    assert_eq!(v["error"]["kind"], "discretisation");
}

#[test]
fn heterogeneous_releases_with_the_best_accountant() {
    let gaussian = "mechanism=gaussian,noise-multiplier=20,count=50";
    let sub = "mechanism=poisson-gaussian,noise-multiplier=1.2,count=300,sampling-rate=0.02";
    let v = json(&[
        "privacy",
        "epsilon",
        "--release",
        gaussian,
        "--release",
        sub,
        "--neighbours",
        "add-remove",
        "--delta",
        "1e-6",
    ]);
    let releases: Vec<Release> = [gaussian, sub].iter().map(|r| r.parse().unwrap()).collect();
    let c = Composition::new(releases, Neighbours::AddRemove).unwrap();
    let best = Choice::Best.epsilon(&c, 1e-6).unwrap();
    assert_eq!(num(&v, "epsilon"), best.estimate.value);
    assert_eq!(v["requested_accountant"], "best");
    let candidates = v["candidates"].as_array().unwrap();
    let keys: Vec<&str> = candidates
        .iter()
        .map(|c| c["accountant"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["rdp", "pld"]);
    for c in candidates {
        assert!(num(&v, "epsilon") <= num(c, "epsilon"));
    }
    assert_eq!(v["release_groups"].as_array().unwrap().len(), 2);

    // The same groups as a fixed prefix leave fewer iterations than none.
    let args = |prefix: bool| {
        let mut a = vec![
            "privacy",
            "max-iterations",
            "--noise-multiplier",
            "3",
            "--epsilon",
            "4",
            "--delta",
            "1e-6",
            "--neighbours",
            "add-remove",
        ];
        if prefix {
            a.extend(["--release", gaussian, "--release", sub]);
        }
        json(&a)["releases"].as_u64().unwrap()
    };
    assert!(args(true) < args(false));
}

#[test]
fn invalid_combinations_are_refused_with_one_sentence() {
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "privacy",
                "epsilon",
                "--mechanism",
                "poisson-gaussian",
                "--sampling-rate",
                "0.01",
                "--noise-multiplier",
                "1",
                "--releases",
                "10",
                "--delta",
                "1e-5",
                "--accountant",
                "analytic",
            ],
            "error: the analytic accountant does not cover poisson-gaussian releases under \
             substitute neighbours: it covers plain Gaussian releases only",
        ),
        (
            &[
                "privacy",
                "epsilon",
                "--mechanism",
                "poisson-gaussian",
                "--sampling-rate",
                "0.01",
                "--noise-multiplier",
                "1",
                "--releases",
                "10",
                "--delta",
                "1e-5",
                "--neighbours",
                "substitute",
                "--accountant",
                "rdp",
            ],
            "error: the rdp accountant does not cover poisson-gaussian releases under substitute \
             neighbours: its Poisson bound (Mironov, Talwar, Zhang 2019) is for add-remove",
        ),
        (
            &[
                "privacy",
                "calibrate",
                "--mechanism",
                "gaussian",
                "--sampling-rate",
                "0.1",
                "--releases",
                "10",
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
            ],
            "error: gaussian takes no sampling rate, batch or population",
        ),
        (
            &[
                "privacy",
                "delta",
                "--release",
                "mechanism=gaussian,count=3",
                "--epsilon",
                "1",
            ],
            "error: invalid value 'mechanism=gaussian,count=3' for '--release <SPEC>': a \
             release needs the field 'noise-multiplier'",
        ),
        (
            &[
                "privacy",
                "calibrate",
                "--mechanism",
                "dp-barker",
                "--batch",
                "433",
                "--population",
                "33333",
                "--releases",
                "1000",
                "--epsilon",
                "10",
                "--delta",
                "1e-6",
            ],
            "error: DP Barker's noise is fixed by its total variance C (Räisä 2020, Thm 3.3), \
             so there is no noise multiplier to calibrate: `privacy epsilon` gives what K \
             releases cost, `privacy max-iterations` how many fit",
        ),
    ];
    for (args, want) in cases {
        let out = coordinator(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim_end(), want, "{args:?}");
    }
}

/// Batches drawn without replacement are accounted under both relations; under add-remove
/// `best` compares the RDP and PLD bounds of the same dominating pair and keeps the smaller.
#[test]
fn batches_are_accounted_under_both_relations() {
    for neighbours in ["add-remove", "substitute"] {
        let v = json(&[
            "privacy",
            "epsilon",
            "--mechanism",
            "batch-gaussian",
            "--batch",
            "100",
            "--population",
            "10000",
            "--noise-multiplier",
            "2",
            "--releases",
            "1000",
            "--delta",
            "1e-5",
            "--neighbours",
            neighbours,
        ]);
        let keys: Vec<&str> = v["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["accountant"].as_str().unwrap())
            .collect();
        assert_eq!(keys, ["rdp", "pld"], "{neighbours}");
        assert_eq!(v["accountant"], "pld", "{neighbours}: {v}");
        let eps = num(&v, "epsilon");
        assert!(eps > 0.0 && eps < 10.0, "{neighbours}: {eps}");
    }
}
