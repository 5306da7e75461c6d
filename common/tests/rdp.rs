//! The RDP accountant against Google's dp-accounting and mpmath (data/gen_rdp_reference.py,
//! committed as data/rdp_reference.json), and against its own contracts.
use std::sync::LazyLock;

use fedmcmc_common::accountant::rdp::{RdpConversion, RdpCurve, RdpError};
use fedmcmc_common::accountant::{AccountantError, GaussianComposition};
use fedmcmc_common::neighbours::Neighbours;
use serde_json::Value;

static REFERENCE: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(include_str!("data/rdp_reference.json")).expect("reference parses")
});

/// Same formulas as dp-accounting, so only rounding separates the two.
const DP_ACCOUNTING_TOLERANCE: f64 = 1e-6;
/// Against 50-digit mpmath.
const MPMATH_TOLERANCE: f64 = 1e-9;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn rel(got: f64, want: f64) -> f64 {
    if got == want {
        0.0
    } else {
        ((got - want) / want).abs()
    }
}

fn mechanism(m: &Value) -> RdpCurve {
    let s = f(&m["noise_multiplier"]);
    match m["kind"].as_str().unwrap() {
        "gaussian" => RdpCurve::gaussian(s),
        "poisson" => RdpCurve::poisson_gaussian(s, f(&m["sampling_rate"])),
        "batch" => RdpCurve::batch_gaussian(
            s,
            m["batch"].as_u64().unwrap(),
            m["population"].as_u64().unwrap(),
        ),
        other => panic!("unknown mechanism kind {other}"),
    }
    .unwrap()
}

fn mechanisms() -> &'static [Value] {
    REFERENCE["mechanisms"].as_array().unwrap()
}

fn named(name: &str) -> RdpCurve {
    mechanism(
        mechanisms()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no mechanism {name}")),
    )
}

/// ε at integer order α from a curve.
fn at(curve: &RdpCurve, order: f64) -> f64 {
    let i = RdpCurve::orders()
        .iter()
        .position(|&a| a == order)
        .unwrap_or_else(|| panic!("order {order} not on the grid"));
    curve.epsilons()[i]
}

#[test]
fn the_grid_is_the_generators() {
    let want: Vec<f64> = REFERENCE["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    assert_eq!(RdpCurve::orders(), want.as_slice());
    assert!(RdpCurve::orders().windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn single_release_curves_match_dp_accounting() {
    let mut worst = 0.0f64;
    let mut checked = 0;
    for m in mechanisms() {
        let curve = mechanism(m);
        let want = m["rdp"].as_array().unwrap();
        assert_eq!(want.len(), curve.epsilons().len());
        for ((&a, &got), w) in RdpCurve::orders().iter().zip(curve.epsilons()).zip(want) {
            let name = &m["name"];
            match w.as_f64() {
                // dp-accounting's fractional series gave up (it logs "Excluding this order").
                None => assert_eq!(got, f64::INFINITY, "{name} at order {a}"),
                Some(w) => {
                    let e = rel(got, w);
                    assert!(
                        e <= DP_ACCOUNTING_TOLERANCE,
                        "{name} at order {a}: {got} vs dp-accounting {w} (rel {e:e})"
                    );
                    worst = worst.max(e);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 5000);
    println!("RDP curves: {checked} values, max relative deviation from dp-accounting {worst:e}");
}

#[test]
fn compositions_match_dp_accounting_at_delta_and_at_epsilon() {
    let cases = REFERENCE["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    let mut worst = 0.0f64;
    for c in cases {
        let curves: Vec<(RdpCurve, f64)> = c["releases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (named(r[0].as_str().unwrap()), f(&r[1])))
            .collect();
        let parts: Vec<(&RdpCurve, f64)> = curves.iter().map(|(c, k)| (c, *k)).collect();
        let composed = RdpCurve::compose(&parts).unwrap();
        let delta = f(&c["delta"]);
        let what = &c["releases"];

        let got = composed.epsilon(delta, RdpConversion::Improved).unwrap();
        let e = rel(got.epsilon, f(&c["epsilon"]));
        assert!(
            e <= DP_ACCOUNTING_TOLERANCE,
            "{what}: eps {} vs {} (rel {e:e})",
            got.epsilon,
            c["epsilon"]
        );
        assert_eq!(got.order, f(&c["order"]), "{what}: optimal order");
        worst = worst.max(e);

        let got = composed.epsilon(delta, RdpConversion::Mironov).unwrap();
        let e = rel(got.epsilon, f(&c["epsilon_mironov"]));
        assert!(
            e <= DP_ACCOUNTING_TOLERANCE,
            "{what}: Mironov eps (rel {e:e})"
        );
        assert_eq!(got.order, f(&c["order_mironov"]), "{what}: Mironov order");
        worst = worst.max(e);

        let got = composed
            .delta(f(&c["epsilon_query"]), RdpConversion::Improved)
            .unwrap();
        let e = rel(got.delta, f(&c["delta_at_epsilon"]));
        assert!(
            e <= DP_ACCOUNTING_TOLERANCE,
            "{what}: delta {} vs {} (rel {e:e})",
            got.delta,
            c["delta_at_epsilon"]
        );
        assert_eq!(got.order, f(&c["delta_order"]), "{what}: delta order");
        worst = worst.max(e);
    }
    println!(
        "{} compositions: max relative deviation of eps/delta from dp-accounting {} is {worst:e}",
        cases.len(),
        REFERENCE["dp_accounting"]
    );
}

#[test]
fn poisson_integer_orders_match_the_exact_binomial_expansion() {
    let mut checked = 0;
    for m in mechanisms().iter().filter(|m| m["kind"] == "poisson") {
        let curve = mechanism(m);
        for row in m["exact_integer_orders"].as_array().unwrap() {
            let (a, want) = (f(&row[0]), f(&row[1]));
            let e = rel(at(&curve, a), want);
            assert!(e <= MPMATH_TOLERANCE, "{} at {a}: rel {e:e}", m["name"]);
            checked += 1;
        }
    }
    assert!(checked > 300);
}

/// dp-accounting's (and our) Thm 27 refinement may only lower WBK19 Thm 9, the bound the
/// thesis quotes (Räisä 2020, Thm 3.5); at q = 1/2 and above Thm 9 binds at every order.
#[test]
fn without_replacement_is_at_most_the_thesis_bound() {
    let mut strictly_below = 0;
    for m in mechanisms().iter().filter(|m| m["kind"] == "batch") {
        let curve = mechanism(m);
        for row in m["thm9_integer_orders"].as_array().unwrap() {
            let (a, thm9) = (f(&row[0]), f(&row[1]));
            let got = at(&curve, a);
            assert!(
                got <= thm9 * (1.0 + MPMATH_TOLERANCE),
                "{} at {a}: {got} above Thm 9's {thm9}",
                m["name"]
            );
            if got < thm9 * (1.0 - 1e-6) {
                strictly_below += 1;
            }
        }
    }
    assert!(strictly_below > 0, "Thm 27 never tightened anything");
}

#[test]
fn dp_barker_matches_the_thesis_bound_in_mpmath() {
    for b in REFERENCE["barker"].as_array().unwrap() {
        let (batch, population) = (
            b["batch"].as_u64().unwrap(),
            b["population"].as_u64().unwrap(),
        );
        let curve = RdpCurve::dp_barker(batch, population).unwrap();
        assert_eq!(curve.neighbours(), Some(Neighbours::Substitute));
        let rows = b["rdp"].as_array().unwrap();
        let finite: Vec<f64> = RdpCurve::orders()
            .iter()
            .zip(curve.epsilons())
            .filter(|(_, e)| e.is_finite())
            .map(|(&a, _)| a)
            .collect();
        let want_orders: Vec<f64> = rows.iter().map(|r| f(&r[0])).collect();
        assert_eq!(finite, want_orders, "Barker b={batch}: orders 2 < α < b/5");
        for row in rows {
            let (a, want) = (f(&row[0]), f(&row[1]));
            let e = rel(at(&curve, a), want);
            assert!(e <= MPMATH_TOLERANCE, "Barker b={batch} at {a}: rel {e:e}");
        }
    }
    for c in REFERENCE["barker_cases"].as_array().unwrap() {
        let b = REFERENCE["barker"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == c["barker"])
            .unwrap();
        let one = RdpCurve::dp_barker(
            b["batch"].as_u64().unwrap(),
            b["population"].as_u64().unwrap(),
        )
        .unwrap();
        let k = RdpCurve::compose(&[(&one, f(&c["iterations"]))]).unwrap();
        let delta = f(&c["delta"]);
        for (conversion, eps, order) in [
            (RdpConversion::Improved, "epsilon", "order"),
            (RdpConversion::Mironov, "epsilon_mironov", "order_mironov"),
        ] {
            let got = k.epsilon(delta, conversion).unwrap();
            let e = rel(got.epsilon, f(&c[eps]));
            assert!(e <= MPMATH_TOLERANCE, "{c}: {conversion:?} rel {e:e}");
            assert_eq!(got.order, f(&c[order]), "{c}: {conversion:?} order");
        }
    }
}

/// A family of curves over one parameter, for the monotonicity properties.
fn epsilons(curves: impl Iterator<Item = RdpCurve>, delta: f64, c: RdpConversion) -> Vec<f64> {
    curves
        .map(|k| k.epsilon(delta, c).unwrap().epsilon)
        .collect()
}

fn assert_monotone(values: &[f64], increasing: bool, what: &str) {
    for w in values.windows(2) {
        let ok = if increasing {
            w[0] <= w[1]
        } else {
            w[0] >= w[1]
        };
        assert!(ok, "{what}: not monotone: {values:?}");
    }
    assert!(
        values.first() != values.last(),
        "{what}: constant: {values:?}"
    );
}

const CONVERSIONS: [RdpConversion; 2] = [RdpConversion::Improved, RdpConversion::Mironov];
const MULTIPLIERS: [f64; 8] = [0.5, 0.7, 1.0, 1.3, 2.0, 3.0, 5.0, 10.0];

fn times(curve: RdpCurve, count: f64) -> RdpCurve {
    RdpCurve::compose(&[(&curve, count)]).unwrap()
}

#[test]
fn epsilon_decreases_in_the_noise_multiplier() {
    for c in CONVERSIONS {
        let gaussian = MULTIPLIERS.map(|s| times(RdpCurve::gaussian(s).unwrap(), 100.0));
        assert_monotone(&epsilons(gaussian.into_iter(), 1e-5, c), false, "gaussian");
        let poisson =
            MULTIPLIERS.map(|s| times(RdpCurve::poisson_gaussian(s, 0.01).unwrap(), 1000.0));
        assert_monotone(&epsilons(poisson.into_iter(), 1e-5, c), false, "poisson");
        let batch =
            MULTIPLIERS.map(|s| times(RdpCurve::batch_gaussian(s, 100, 10_000).unwrap(), 1000.0));
        assert_monotone(&epsilons(batch.into_iter(), 1e-5, c), false, "batch");
    }
}

#[test]
fn epsilon_increases_in_the_number_of_releases() {
    let counts = [0.0, 1.0, 2.0, 10.0, 100.0, 1000.0, 1e4, 1e5];
    let bases = [
        RdpCurve::gaussian(3.0).unwrap(),
        RdpCurve::poisson_gaussian(1.0, 0.01).unwrap(),
        RdpCurve::batch_gaussian(1.0, 100, 10_000).unwrap(),
        RdpCurve::dp_barker(200, 100_000).unwrap(),
    ];
    for c in CONVERSIONS {
        for base in &bases {
            let curves = counts.iter().map(|&k| times(base.clone(), k));
            assert_monotone(&epsilons(curves, 1e-5, c), true, &format!("{base:?}"));
        }
    }
}

#[test]
fn epsilon_increases_in_the_sampling_rate() {
    let rates = [0.0, 1e-4, 1e-3, 0.01, 0.05, 0.2, 0.5, 0.9, 1.0];
    let batches = [1, 10, 50, 100, 500, 2000, 10_000];
    for c in CONVERSIONS {
        let poisson = rates.map(|q| times(RdpCurve::poisson_gaussian(1.0, q).unwrap(), 100.0));
        assert_monotone(&epsilons(poisson.into_iter(), 1e-5, c), true, "poisson");
        let batch =
            batches.map(|b| times(RdpCurve::batch_gaussian(1.0, b, 10_000).unwrap(), 100.0));
        assert_monotone(&epsilons(batch.into_iter(), 1e-5, c), true, "batch");
        // DP Barker's base bound depends on b itself, so q = b/n varies through n.
        let barker = [1_000_000, 100_000, 10_000, 1000, 200]
            .map(|n| times(RdpCurve::dp_barker(100, n).unwrap(), 100.0));
        assert_monotone(&epsilons(barker.into_iter(), 1e-5, c), true, "barker");
    }
    // Full sampling is the plain Gaussian.
    let g = RdpCurve::gaussian(1.3).unwrap();
    let all = |c: RdpCurve| c.epsilons().to_vec();
    assert_eq!(
        all(RdpCurve::poisson_gaussian(1.3, 1.0).unwrap()),
        g.epsilons()
    );
    assert_eq!(
        all(RdpCurve::batch_gaussian(1.3, 7, 7).unwrap()),
        g.epsilons()
    );
}

#[test]
fn improved_conversion_is_never_worse_than_mironovs() {
    let curves = [
        RdpCurve::gaussian(1.0).unwrap(),
        times(RdpCurve::gaussian(5.0).unwrap(), 300.0),
        times(RdpCurve::poisson_gaussian(0.7, 0.02).unwrap(), 5000.0),
        times(RdpCurve::batch_gaussian(2.0, 64, 5000).unwrap(), 2000.0),
        times(RdpCurve::dp_barker(300, 30_000).unwrap(), 10_000.0),
    ];
    for curve in &curves {
        for delta in [0.5, 1e-2, 1e-5, 1e-9, 1e-15] {
            let improved = curve.epsilon(delta, RdpConversion::Improved).unwrap();
            let mironov = curve.epsilon(delta, RdpConversion::Mironov).unwrap();
            assert!(improved.epsilon <= mironov.epsilon, "{curve:?} at {delta}");
        }
        for eps in [0.1, 1.0, 3.0, 10.0] {
            let improved = curve.delta(eps, RdpConversion::Improved).unwrap();
            let mironov = curve.delta(eps, RdpConversion::Mironov).unwrap();
            assert!(improved.delta <= mironov.delta, "{curve:?} at {eps}");
        }
    }
}

/// RDP is a valid but looser account of Gaussian compositions than the tight PLD curve (seed
/// 003 Thm 3.2), also for heterogeneous multipliers.
#[test]
fn rdp_never_beats_the_tight_gaussian_curve() {
    let compositions: [&[(f64, f64)]; 6] = [
        &[(1.0, 1.0)],
        &[(10.0, 0.8)],
        &[(100.0, 3.0)],
        &[(1000.0, 20.0)],
        &[(5.0, 1.0), (50.0, 4.0)],
        &[(1.0, 0.3), (200.0, 10.0), (3.0, 2.0)],
    ];
    for releases in compositions {
        let tight = GaussianComposition::from_releases(releases).unwrap();
        let curves: Vec<(RdpCurve, f64)> = releases
            .iter()
            .map(|&(k, s)| (RdpCurve::gaussian(s).unwrap(), k))
            .collect();
        let parts: Vec<(&RdpCurve, f64)> = curves.iter().map(|(c, k)| (c, *k)).collect();
        let rdp = RdpCurve::compose(&parts).unwrap();
        for delta in [1e-3, 1e-5, 1e-8, 1e-12] {
            let exact = tight.epsilon(delta);
            for c in CONVERSIONS {
                let got = rdp.epsilon(delta, c).unwrap().epsilon;
                assert!(
                    got >= exact,
                    "{releases:?} at {delta}: {c:?} {got} < tight {exact}"
                );
            }
        }
    }
}

#[test]
fn composition_adds_curves_and_keeps_the_relation() {
    let g = RdpCurve::gaussian(2.0).unwrap();
    let p = RdpCurve::poisson_gaussian(1.0, 0.1).unwrap();
    let both = RdpCurve::compose(&[(&g, 3.0), (&p, 2.0)]).unwrap();
    assert_eq!(both.neighbours(), Some(Neighbours::AddRemove));
    for ((&x, &y), &z) in g.epsilons().iter().zip(p.epsilons()).zip(both.epsilons()) {
        assert_eq!(z, 3.0 * x + 2.0 * y);
    }
    // A zero count of a curve with +∞ entries contributes nothing (no 0·∞ = NaN).
    let barker = RdpCurve::dp_barker(100, 1000).unwrap();
    let none = RdpCurve::compose(&[(&barker, 0.0), (&g, 1.0)]).unwrap();
    assert_eq!(none.epsilons(), g.epsilons());
    assert_eq!(none.neighbours(), None);
    let empty = RdpCurve::compose(&[]).unwrap();
    assert!(empty.epsilons().iter().all(|&e| e == 0.0));
    assert_eq!(
        empty
            .epsilon(1e-5, RdpConversion::Improved)
            .unwrap()
            .epsilon,
        0.0
    );
    assert_eq!(
        empty.delta(0.5, RdpConversion::Improved).unwrap().delta,
        0.0
    );
    assert!(empty.delta(0.5, RdpConversion::Mironov).unwrap().delta < 1e-200);
    assert_eq!(
        RdpCurve::compose(&[(&p, 1.0), (&barker, 1.0)]),
        Err(RdpError::MixedNeighbours)
    );
}

#[test]
fn bad_inputs_are_refused_with_typed_errors() {
    use AccountantError::*;
    assert_eq!(
        RdpCurve::gaussian(0.0),
        Err(RdpError::Accountant(InvalidNoiseMultiplier(0.0)))
    );
    assert!(matches!(
        RdpCurve::poisson_gaussian(f64::NAN, 0.1),
        Err(RdpError::Accountant(InvalidNoiseMultiplier(_)))
    ));
    for q in [-0.1, 1.5, f64::NAN] {
        assert!(matches!(
            RdpCurve::poisson_gaussian(1.0, q),
            Err(RdpError::InvalidSamplingRate(_))
        ));
    }
    for (b, n) in [(0, 10), (11, 10), (1, 0)] {
        assert_eq!(
            RdpCurve::batch_gaussian(1.0, b, n),
            Err(RdpError::InvalidBatch {
                batch: b,
                population: n
            })
        );
    }
    assert_eq!(
        RdpCurve::dp_barker(15, 1000),
        Err(RdpError::BarkerBatchTooSmall(15))
    );
    assert!(RdpCurve::dp_barker(16, 1000).is_ok());
    assert!(matches!(
        RdpCurve::dp_barker(100, 50),
        Err(RdpError::InvalidBatch { .. })
    ));
    let g = RdpCurve::gaussian(1.0).unwrap();
    assert_eq!(
        RdpCurve::compose(&[(&g, -1.0)]),
        Err(RdpError::Accountant(InvalidReleaseCount(-1.0)))
    );
    for d in [0.0, 1.0, f64::NAN] {
        assert!(matches!(
            g.epsilon(d, RdpConversion::Improved),
            Err(RdpError::Accountant(InvalidDelta(_)))
        ));
    }
    for e in [0.0, -1.0, f64::INFINITY] {
        assert!(matches!(
            g.delta(e, RdpConversion::Mironov),
            Err(RdpError::Accountant(InvalidEpsilon(_)))
        ));
    }
    let msg = RdpError::BarkerBatchTooSmall(10).to_string();
    assert!(msg.contains("16") && msg.contains("10"), "{msg}");
}
