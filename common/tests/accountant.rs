//! The privacy accountants against 50-digit references and against their own contracts.
use fedmcmc_common::accountant::{
    Accountant, AccountantError, GaussianComposition, calibrate, max_mu, max_releases,
    mu_per_release, zcdp,
};

/// (mu, epsilon, delta, ln_delta) from data/gen_gaussian_reference.py (mpmath).
fn reference() -> Vec<(f64, f64, f64, f64)> {
    include_str!("data/gaussian_reference.csv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("mu,"))
        .map(|l| {
            let v: Vec<f64> = l.split(',').map(|x| x.parse().unwrap()).collect();
            (v[0], v[1], v[2], v[3])
        })
        .collect()
}

fn rel(got: f64, want: f64) -> f64 {
    ((got - want) / want).abs()
}

/// δ to 1e-9 relative wherever δ ≥ 1e-300; ln δ to 1e-9 relative where |ln δ| > 1 (down to
/// δ = 1e-1000 and rows with ln δ ≈ −4e7) and absolute nearer δ = 1, where a relative bound on
/// ln δ → 0 would ask for more than δ carries. The μ ∈ {1e-8, 1e-6} rows pass 1e-9 too: the
/// bracket erfcx(x₁) − erfcx(x₂) cancels by ~x₁/√μ ≤ 3e5 wherever δ ≥ 1e-300 (≈ 1.5e-10 seen).
#[test]
fn tight_delta_matches_mpmath_deep_into_the_tails() {
    let rows = reference();
    assert!(rows.len() > 400);
    let (mut worst_delta, mut worst_tiny, mut worst_ln, mut deepest) =
        (0.0f64, 0.0f64, 0.0f64, 1.0f64);
    let mut checked_delta = 0;
    for &(mu, eps, want, want_ln) in &rows {
        let c = GaussianComposition::from_mu(mu).unwrap();
        if want >= 1e-300 {
            let e = rel(c.delta(eps), want);
            assert!(
                e <= 1e-9,
                "mu={mu} eps={eps}: delta {} vs {want} (rel {e:e})",
                c.delta(eps)
            );
            if mu >= 1e-4 {
                worst_delta = worst_delta.max(e);
            } else {
                worst_tiny = worst_tiny.max(e);
            }
            deepest = deepest.min(want);
            checked_delta += 1;
        }
        let e = (c.ln_delta(eps) - want_ln).abs() / want_ln.abs().max(1.0);
        assert!(
            e <= 1e-9,
            "mu={mu} eps={eps}: ln delta {} vs {want_ln} (rel {e:e})",
            c.ln_delta(eps)
        );
        worst_ln = worst_ln.max(e);
    }
    assert!(
        deepest < 1.01e-300,
        "the reference must reach delta = 1e-300"
    );
    println!(
        "{checked_delta} delta rows (down to {deepest:e}): max rel err {worst_delta:e} for mu >= 1e-4, \
         {worst_tiny:e} for mu in {{1e-8, 1e-6}}; \
         {} ln delta rows: max err (rel, abs near 0) {worst_ln:e}",
        rows.len()
    );
}

#[test]
fn tight_delta_edge_values() {
    let c = GaussianComposition::from_mu(0.7).unwrap();
    // δ(0) = erf(√μ/2) and δ(∞) = 0; μ = 0 releases nothing.
    assert!(rel(c.delta(0.0), libm::erf(0.7f64.sqrt() / 2.0)) < 1e-14);
    assert_eq!(c.delta(f64::INFINITY), 0.0);
    assert_eq!(c.ln_delta(f64::INFINITY), f64::NEG_INFINITY);
    assert!(c.delta(f64::NAN).is_nan());
    let none = GaussianComposition::from_mu(0.0).unwrap();
    assert_eq!(none.delta(1.0), 0.0);
    assert_eq!(none.epsilon(1e-9), 0.0);
    // Monotone in ε across the switch between the two forms at ε = μ.
    let (below, at, above) = (c.delta(0.7 - 1e-9), c.delta(0.7), c.delta(0.7 + 1e-9));
    assert!(below >= at && at >= above, "{below} {at} {above}");
}

#[test]
fn epsilon_is_the_smallest_that_fits() {
    for mu in [1e-4, 5e-4, 0.02, 0.5, 3.0, 40.0, 700.0] {
        let c = GaussianComposition::from_mu(mu).unwrap();
        for delta in [0.5, 1e-3, 1e-6, 1e-12, 1e-50, 1e-300] {
            let eps = c.epsilon(delta);
            if eps == 0.0 {
                assert!(c.delta(0.0) <= delta);
                continue;
            }
            let below = f64::from_bits(eps.to_bits() - 1);
            assert!(
                c.delta(eps) <= delta && c.delta(below) > delta,
                "mu={mu} delta={delta} eps={eps}"
            );
        }
    }
}

#[test]
fn max_mu_is_the_boundary() {
    for eps in [0.01, 0.3, 1.0, 4.0, 20.0] {
        for delta in [0.1, 1e-5, 1e-10, 1e-100] {
            let mu = max_mu(eps, delta).unwrap();
            let next = f64::from_bits(mu.to_bits() + 1);
            assert!(GaussianComposition::from_mu(mu).unwrap().delta(eps) <= delta);
            assert!(GaussianComposition::from_mu(next).unwrap().delta(eps) > delta);
            // The tight accountant admits at least as much as zCDP.
            assert!(mu >= zcdp::max_rho(eps, delta).unwrap());
        }
    }
}

#[test]
fn zcdp_epsilon_is_never_below_the_tight_epsilon() {
    for s in [0.5, 1.0, 3.0, 10.0, 31.622_776_601_683_79, 100.0] {
        for k in [1.0, 2.0, 10.0, 100.0, 1e3, 1e4, 1e5] {
            let c = GaussianComposition::from_releases(&[(k, s)]).unwrap();
            for delta in [0.1, 1e-3, 1e-6, 1e-10, 1e-30] {
                let tight = Accountant::Analytic.epsilon(&c, delta).unwrap();
                let loose = Accountant::Zcdp.epsilon(&c, delta).unwrap();
                assert!(
                    loose >= tight,
                    "s={s} k={k} delta={delta}: zcdp {loose} < tight {tight}"
                );
                assert_eq!(loose, zcdp::epsilon(c.mu(), delta).unwrap());
            }
        }
    }
}

fn delta_at(accountant: Accountant, k: u64, s: f64, eps: f64) -> f64 {
    let c = GaussianComposition::from_releases(&[(k as f64, s)]).unwrap();
    accountant.delta(&c, eps).unwrap()
}

fn assert_max_releases(accountant: Accountant, s: f64, eps: f64, delta: f64) -> u64 {
    let k = max_releases(accountant, s, eps, delta).unwrap();
    let (at, next) = (
        delta_at(accountant, k, s, eps),
        delta_at(accountant, k + 1, s, eps),
    );
    assert!(
        at <= delta && delta < next,
        "{accountant} s={s} eps={eps} delta={delta}: k={k} {at} {next}"
    );
    k
}

#[test]
fn max_releases_is_the_last_count_that_fits() {
    for accountant in Accountant::ALL {
        for s in [0.3, 1.0, 2.0, 7.5, 50.0, 400.0] {
            for eps in [0.05, 0.5, 1.0, 3.0, 10.0] {
                for delta in [1e-2, 1e-5, 1e-9] {
                    assert_max_releases(accountant, s, eps, delta);
                }
            }
        }
    }
}

/// Räisä 2020, Sec. 6.1's setting: s = τ√n with τ = 0.1, n = 100 000, δ = 0.1/n.
#[test]
fn max_releases_in_the_thesis_setting() {
    let (tau, n) = (0.1, 100_000.0f64);
    let s = tau * n.sqrt();
    let delta = 0.1 / n;
    let mut counts = Vec::new();
    for eps in 1..=6 {
        let eps = f64::from(eps);
        let tight = assert_max_releases(Accountant::Analytic, s, eps, delta);
        let loose = assert_max_releases(Accountant::Zcdp, s, eps, delta);
        // Thm 3.1: k = ⌊2τ²nρ⌋.
        let thm31 = (2.0 * tau * tau * n * zcdp::max_rho(eps, delta).unwrap()).floor() as u64;
        assert_eq!(loose, thm31);
        assert!(tight > loose);
        counts.push((eps, tight, loose));
    }
    println!("thesis case (eps, analytic k, zcdp k): {counts:?}");
    // Checked with mpmath: δ(k) ≤ 1e-6 < δ(k + 1) for each analytic k.
    let want = [
        (1.0, 56, 34),
        (2.0, 201, 135),
        (3.0, 419, 294),
        (4.0, 702, 507),
        (5.0, 1041, 770),
        (6.0, 1431, 1079),
    ];
    assert_eq!(counts, want);
}

#[test]
fn calibrate_returns_the_smallest_multiplier() {
    for accountant in Accountant::ALL {
        for k in [1u64, 10, 1000, 100_000] {
            for (eps, delta) in [(0.1, 1e-5), (1.0, 1e-6), (8.0, 1e-10)] {
                let s = calibrate(accountant, k, eps, delta).unwrap();
                assert!(
                    delta_at(accountant, k, s, eps) <= delta,
                    "{accountant} k={k}: s={s} does not fit"
                );
                let smaller = s * (1.0 - 1e-9);
                assert!(
                    delta_at(accountant, k, smaller, eps) > delta,
                    "{accountant} k={k}: {smaller} fits"
                );
                assert!(max_releases(accountant, s, eps, delta).unwrap() >= k);
            }
        }
    }
}

#[test]
fn heterogeneous_composition_adds_mus() {
    // DP HMC, Räisä 2020, Thm 4.3: one log-ratio release and L + 1 = 6 gradient releases per iteration.
    let (k, sl, sg) = (250.0, 12.0, 30.0);
    let c = GaussianComposition::from_releases(&[(k, sl), (6.0 * k, sg)]).unwrap();
    let sum = k * mu_per_release(sl) + 6.0 * k * mu_per_release(sg);
    assert!(rel(c.mu(), sum) < 1e-15);
    assert!(rel(c.mu(), k / (2.0 * sl * sl) + 6.0 * k / (2.0 * sg * sg)) < 1e-15);
    // Equal multipliers reduce to the homogeneous case, however they are split.
    let split = GaussianComposition::from_releases(&[(3.0, 5.0), (4.0, 5.0)]).unwrap();
    let whole = GaussianComposition::from_releases(&[(7.0, 5.0)]).unwrap();
    assert!(rel(split.mu(), whole.mu()) < 1e-15);
    assert!(rel(split.delta(1.0), whole.delta(1.0)) < 1e-12);
    assert_eq!(GaussianComposition::from_releases(&[]).unwrap().mu(), 0.0);
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    use AccountantError::*;
    let a = Accountant::Analytic;
    assert_eq!(max_mu(0.0, 1e-5), Err(InvalidEpsilon(0.0)));
    assert!(matches!(max_mu(f64::NAN, 1e-5), Err(InvalidEpsilon(_))));
    assert_eq!(max_mu(1.0, 1.0), Err(InvalidDelta(1.0)));
    assert_eq!(max_mu(1.0, 0.0), Err(InvalidDelta(0.0)));
    assert_eq!(
        max_releases(a, -1.0, 1.0, 1e-5),
        Err(InvalidNoiseMultiplier(-1.0))
    );
    assert_eq!(
        max_releases(a, f64::INFINITY, 1.0, 1e-5),
        Err(InvalidNoiseMultiplier(f64::INFINITY))
    );
    assert_eq!(max_releases(a, 1e12, 1.0, 1e-5), Err(TooManyReleases));
    assert_eq!(calibrate(a, 0, 1.0, 1e-5), Err(ZeroReleases));
    assert_eq!(calibrate(a, 10, 1.0, 2.0), Err(InvalidDelta(2.0)));
    assert_eq!(GaussianComposition::from_mu(-1.0), Err(InvalidMu(-1.0)));
    assert_eq!(
        GaussianComposition::from_releases(&[(-2.0, 1.0)]),
        Err(InvalidReleaseCount(-2.0))
    );
    assert_eq!(
        GaussianComposition::from_releases(&[(2.0, 0.0)]),
        Err(InvalidNoiseMultiplier(0.0))
    );
    assert_eq!(zcdp::epsilon(1.0, 0.0), Err(InvalidDelta(0.0)));
    let c = GaussianComposition::from_mu(1.0).unwrap();
    assert_eq!(a.delta(&c, -1.0), Err(InvalidEpsilon(-1.0)));
    assert_eq!(
        "rdp".parse::<Accountant>(),
        Err(UnknownAccountant("rdp".into()))
    );
    assert_eq!(
        InvalidDelta(1.5).to_string(),
        "delta must lie strictly between 0 and 1, got 1.5"
    );
}

#[test]
fn accountant_names_round_trip() {
    for a in Accountant::ALL {
        assert_eq!(a.key().parse::<Accountant>().unwrap(), a);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, format!("\"{}\"", a.key()));
        assert_eq!(serde_json::from_str::<Accountant>(&json).unwrap(), a);
    }
    assert!(Accountant::Analytic.name().contains("Thm 3.2"));
}
