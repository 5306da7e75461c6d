//! The generic solvers over every accountant (Räisä 2020, Alg. 2 generalised): their defining
//! properties, `best` against each valid accountant, monotonicity, measures' conversions and
//! refusals.
use fedmcmc_common::accountant::{
    Accountant, Cancel, Choice, Composition, CompositionError, Measure, MechanismKind, Method,
    Release, StatedError, calibrate, max_releases, zcdp,
};
use fedmcmc_common::neighbours::Neighbours::{self, AddRemove, Substitute};

const POISSON: MechanismKind = MechanismKind::PoissonGaussian {
    sampling_rate: 0.01,
};
const BATCH: MechanismKind = MechanismKind::BatchGaussian {
    batch: 100,
    population: 10_000,
};

fn release(mechanism: MechanismKind, s: f64, count: f64) -> Release {
    Release {
        mechanism,
        noise_multiplier: s,
        count,
    }
}

fn composition(releases: &[Release], neighbours: Neighbours) -> Composition {
    Composition::new(releases.to_vec(), neighbours).unwrap()
}

/// (method, mechanism, multiplier, neighbours) cases each method covers.
fn covered() -> Vec<(Method, MechanismKind, f64, Neighbours)> {
    let mut cases = Vec::new();
    for m in Method::ALL {
        cases.push((m, MechanismKind::Gaussian, 10.0, Substitute));
    }
    for m in [Method::Rdp, Method::Pld] {
        cases.push((m, POISSON, 1.5, AddRemove));
    }
    cases.push((Method::Pld, POISSON, 1.5, Substitute));
    cases.push((Method::Rdp, BATCH, 1.5, Substitute));
    // New pairs only: a batch under add/remove is the Poisson pair at s/2 for the PLD.
    cases.push((Method::Rdp, BATCH, 3.0, AddRemove));
    cases.push((Method::Pld, BATCH, 1.5, Substitute));
    cases
}

fn delta_of(m: Method, c: &Composition, epsilon: f64) -> f64 {
    Choice::Only(m).delta(c, epsilon).unwrap().estimate.value
}

#[test]
fn max_releases_is_the_last_count_that_fits() {
    let (eps, delta) = (1.0, 1e-5);
    for (m, mech, s, nb) in covered() {
        for prefix in [vec![], vec![release(MechanismKind::Gaussian, 30.0, 10.0)]] {
            let prefix = composition(&prefix, nb);
            let a = Choice::Only(m)
                .max_releases(&prefix, mech, s, eps, delta)
                .unwrap();
            let k = a.estimate.value.releases;
            assert!(k > 0, "{m} {mech:?}");
            let at = |k: u64| delta_of(m, &prefix.then(release(mech, s, k as f64)).unwrap(), eps);
            let (d, next) = (at(k), at(k + 1));
            assert!(d <= delta && delta < next, "{m} {mech:?} k={k}: {d} {next}");
            assert_eq!(d, a.estimate.value.delta_at_releases);
            assert_eq!(next, a.estimate.value.delta_at_next);
            assert_eq!(a.estimate.method, m);
        }
    }
}

#[test]
fn the_fast_gaussian_path_agrees_with_the_integer_search() {
    for a in Accountant::ALL {
        let m = if a == Accountant::Analytic {
            Method::Analytic
        } else {
            Method::Zcdp
        };
        // A prefix of zero releases forces the generic doubling-and-bisection search.
        let empty = composition(&[release(MechanismKind::Gaussian, 1.0, 0.0)], Substitute);
        for s in [2.0, 30.0] {
            let generic = Choice::Only(m)
                .max_releases(&empty, MechanismKind::Gaussian, s, 1.0, 1e-6)
                .unwrap();
            let fast = max_releases(a, s, 1.0, 1e-6).unwrap();
            assert_eq!(generic.estimate.value.releases, fast, "{a} s={s}");
        }
        let none = composition(&[], Substitute);
        let s = Choice::Only(m)
            .calibrate(
                &none,
                MechanismKind::Gaussian,
                500,
                (1.0, 1e-6),
                &Cancel::new(),
            )
            .unwrap();
        assert_eq!(s.estimate.value, calibrate(a, 500, 1.0, 1e-6).unwrap());
    }
}

#[test]
fn calibrated_noise_fits_and_slightly_less_does_not() {
    let (eps, delta, k) = (2.0, 1e-5, 200);
    for (m, mech, _, nb) in covered() {
        let prefix = composition(&[release(MechanismKind::Gaussian, 40.0, 5.0)], nb);
        let s = Choice::Only(m)
            .calibrate(&prefix, mech, k, (eps, delta), &Cancel::new())
            .unwrap()
            .estimate
            .value;
        let at = |s: f64| delta_of(m, &prefix.then(release(mech, s, k as f64)).unwrap(), eps);
        assert!(at(s) <= delta, "{m} {mech:?}: s={s} does not fit");
        let smaller = s * (1.0 - 1e-6);
        assert!(at(smaller) > delta, "{m} {mech:?}: {smaller} fits");
    }
}

#[test]
fn best_is_no_worse_than_any_valid_accountant() {
    let cases = [
        (
            vec![release(MechanismKind::Gaussian, 3.0, 50.0)],
            Substitute,
        ),
        (vec![release(POISSON, 1.0, 300.0)], AddRemove),
        (vec![release(POISSON, 1.0, 300.0)], Substitute),
        (vec![release(BATCH, 2.0, 300.0)], Substitute),
        (
            vec![
                release(MechanismKind::Gaussian, 20.0, 40.0),
                release(POISSON, 1.2, 200.0),
            ],
            AddRemove,
        ),
    ];
    for (releases, nb) in cases {
        let c = composition(&releases, nb);
        let best = Choice::Best.epsilon(&c, 1e-6).unwrap();
        let valid: Vec<Method> = Method::ALL
            .into_iter()
            .filter(|&m| Choice::Only(m).epsilon(&c, 1e-6).is_ok())
            .collect();
        assert!(!valid.is_empty());
        if c.gaussian().is_some() {
            // The exact curve alone answers for plain Gaussian releases.
            assert_eq!(best.candidates.len(), 1);
            assert_eq!(best.estimate.method, Method::Analytic);
        } else {
            assert_eq!(best.candidates.len(), valid.len(), "{releases:?}");
        }
        for m in &valid {
            let e = Choice::Only(*m).epsilon(&c, 1e-6).unwrap().estimate.value;
            assert!(
                best.estimate.value <= e,
                "{m}: {e} < best {:?}",
                best.estimate
            );
        }
        let best_k = Choice::Best
            .max_releases(&c, MechanismKind::Gaussian, 10.0, 20.0, 1e-6)
            .unwrap();
        for m in &valid {
            let k = Choice::Only(*m)
                .max_releases(&c, MechanismKind::Gaussian, 10.0, 20.0, 1e-6)
                .unwrap();
            assert!(best_k.estimate.value.releases >= k.estimate.value.releases);
        }
    }
}

#[test]
fn epsilon_decreases_in_noise_and_increases_in_releases_and_sampling_rate() {
    let poisson = |q: f64| MechanismKind::PoissonGaussian { sampling_rate: q };
    // Batches from 10 000 rows at rate q = b/n.
    let batch = |q: f64| MechanismKind::BatchGaussian {
        batch: (q * 10_000.0).round() as u64,
        population: 10_000,
    };
    type AtRate = fn(f64) -> MechanismKind;
    let cases: [(Method, Neighbours, AtRate, f64); 7] = [
        (Method::Rdp, AddRemove, poisson, 1.0),
        (Method::Pld, AddRemove, poisson, 1.0),
        (Method::Pld, Substitute, poisson, 1.0),
        (Method::Rdp, Substitute, batch, 2.0),
        (Method::Rdp, AddRemove, batch, 2.0),
        (Method::Pld, Substitute, batch, 2.0),
        (Method::Pld, AddRemove, batch, 2.0),
    ];
    for (m, nb, mechanism, s) in cases {
        let eps = |s: f64, q: f64, k: f64| {
            let c = composition(&[release(mechanism(q), s, k)], nb);
            Choice::Only(m).epsilon(&c, 1e-5).unwrap().estimate.value
        };
        let what = format!("{m} {nb:?} {:?}", mechanism(0.02));
        let by_s = [0.8, 1.0, 1.5, 3.0].map(|f| eps(f * s, 0.02, 100.0));
        let by_k = [10.0, 100.0, 1000.0].map(|k| eps(s, 0.02, k));
        let by_q = [0.005, 0.02, 0.1, 1.0].map(|q| eps(s, q, 100.0));
        assert!(by_s.windows(2).all(|w| w[0] > w[1]), "{what} s: {by_s:?}");
        assert!(by_k.windows(2).all(|w| w[0] < w[1]), "{what} k: {by_k:?}");
        assert!(by_q.windows(2).all(|w| w[0] < w[1]), "{what} q: {by_q:?}");
    }
}

/// A batch under substitution, sandwiched: at least the ε of data sets that realise its
/// worst case (every other row at −½, the differing row ±½: the Poisson add/remove pair at
/// rate b/n, in whichever order is worse), at least the Poisson-substitute pair's (which
/// would under-report it), and no more than the independent RDP bound of Wang, Balle,
/// Kasiviswanathan 2019. Under add/remove its ε is exactly the Poisson pair's at s/2.
#[test]
fn batches_lie_between_their_worst_case_data_and_the_rdp_bound() {
    let eps = |mech: MechanismKind, s: f64, k: f64, nb: Neighbours, m: Method| {
        let c = composition(&[release(mech, s, k)], nb);
        Choice::Only(m).epsilon(&c, 1e-6).unwrap().estimate.value
    };
    for (s, b, k) in [
        (1.0, 100, 1000.0),
        (2.0, 1000, 100.0),
        (0.8, 500, 20.0),
        (1.0, 5000, 3.0),
    ] {
        let batch = MechanismKind::BatchGaussian {
            batch: b,
            population: 10_000,
        };
        let poisson = MechanismKind::PoissonGaussian {
            sampling_rate: b as f64 / 10_000.0,
        };
        let pld = eps(batch, s, k, Substitute, Method::Pld);
        let worst_case_data = eps(poisson, s, k, AddRemove, Method::Pld);
        let poisson_substitute = eps(poisson, s, k, Substitute, Method::Pld);
        let rdp = eps(batch, s, k, Substitute, Method::Rdp);
        let what = format!(
            "s={s} b={b} k={k}: data {worst_case_data} ±½ {poisson_substitute} pld {pld} rdp {rdp}"
        );
        assert!(pld >= worst_case_data * (1.0 - 1e-9), "{what}");
        assert!(pld > poisson_substitute, "{what}");
        assert!(pld < rdp, "{what}");
        println!("{what}");
        let add_remove = eps(batch, s, k, AddRemove, Method::Pld);
        assert_eq!(add_remove, eps(poisson, 0.5 * s, k, AddRemove, Method::Pld));
    }
}

#[test]
fn measures_convert_as_documented() {
    let c = composition(&[release(MechanismKind::Gaussian, 4.0, 30.0)], Substitute);
    let rho = 30.0 / (2.0 * 16.0);
    assert_eq!(Method::Zcdp.measure(&c).unwrap(), Measure::Zcdp { rho });
    let z = Method::Zcdp.measure(&c).unwrap();
    assert_eq!(z.epsilon(1e-6).unwrap(), zcdp::epsilon(rho, 1e-6).unwrap());
    assert_eq!(z.delta(3.0).unwrap(), zcdp::delta(rho, 3.0).unwrap());
    // The PLD agrees with the exact Gaussian curve within its stated error, from above.
    let exact = Method::Analytic.measure(&c).unwrap().epsilon(1e-6).unwrap();
    let pld = Method::Pld.measure(&c).unwrap().epsilon(1e-6).unwrap();
    let StatedError::Discretisation {
        epsilon_additive, ..
    } = Method::Pld.stated_error(&c)
    else {
        panic!("the PLD states a discretisation error");
    };
    assert!(
        exact <= pld && pld <= exact + epsilon_additive,
        "{exact} {pld}"
    );
    // RDP and zCDP are upper bounds on the exact curve.
    let rdp = Method::Rdp.measure(&c).unwrap();
    assert!(rdp.epsilon(1e-6).unwrap() >= exact);
    assert!(rdp.delta(1.0).unwrap() >= Method::Analytic.measure(&c).unwrap().delta(1.0).unwrap());
    // Measures compose only with their own kind.
    assert_eq!(z.compose(&rdp, 1.0), Err(CompositionError::MixedMeasures));
}

#[test]
fn uncovered_compositions_are_refused_with_one_sentence() {
    let poisson = composition(&[release(POISSON, 1.0, 10.0)], Substitute);
    let e = Choice::Only(Method::Analytic)
        .epsilon(&poisson, 1e-5)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the analytic accountant does not cover poisson-gaussian releases under substitute \
         neighbours: it covers plain Gaussian releases only"
    );
    assert!(matches!(
        Choice::Only(Method::Rdp).epsilon(&poisson, 1e-5),
        Err(CompositionError::Unsupported { method: "rdp", .. })
    ));
    let batch = composition(&[release(BATCH, 1.0, 10.0)], Substitute);
    let best = Choice::Best.epsilon(&batch, 1e-5).unwrap();
    assert_eq!(best.candidates.len(), 2, "rdp and pld cover batches");
    assert_eq!(best.estimate.method, Method::Pld);
    let half = composition(&[release(MechanismKind::Gaussian, 3.0, 2.5)], Substitute);
    assert_eq!(
        Choice::Only(Method::Pld).epsilon(&half, 1e-5),
        Err(CompositionError::FractionalCount(2.5))
    );
    let spent = composition(&[release(MechanismKind::Gaussian, 0.5, 100.0)], Substitute);
    assert_eq!(
        Choice::Best.max_releases(&spent, MechanismKind::Gaussian, 3.0, 1.0, 1e-5),
        Err(CompositionError::PrefixExceedsBudget)
    );
}

#[test]
fn releases_parse_from_their_spec() {
    let r: Release = "mechanism=poisson-gaussian,noise-multiplier=1.1,count=100,sampling-rate=0.01"
        .parse()
        .unwrap();
    assert_eq!(r, release(POISSON, 1.1, 100.0));
    let b: Release =
        "mechanism=batch-gaussian,noise-multiplier=2,count=5,batch=100,population=10000"
            .parse()
            .unwrap();
    assert_eq!(b, release(BATCH, 2.0, 5.0));
    for bad in [
        "mechanism=gaussian,noise-multiplier=1,count=1,sampling-rate=0.1",
        "mechanism=poisson-gaussian,noise-multiplier=1,count=1",
        "mechanism=poisson-gaussian,noise-multiplier=1,count=1,sampling-rate=1.5",
        "mechanism=batch-gaussian,noise-multiplier=1,count=1,batch=20,population=10",
        "mechanism=laplace,noise-multiplier=1,count=1",
        "mechanism=gaussian,noise-multiplier=-1,count=1",
        "mechanism=gaussian,noise-multiplier=1",
        "mechanism=gaussian,noise-multiplier=1,count=1,colour=red",
        "mechanism=gaussian,noise-multiplier=x,count=1",
        "mechanism=gaussian,count=1,count=2,noise-multiplier=1",
    ] {
        let e = bad.parse::<Release>().unwrap_err().to_string();
        assert!(!e.is_empty() && !e.contains('\n'), "{bad}: {e}");
    }
    assert_eq!("best".parse::<Choice>(), Ok(Choice::Best));
    assert_eq!("pld".parse::<Choice>(), Ok(Choice::Only(Method::Pld)));
    assert!(matches!(
        "renyi".parse::<Choice>(),
        Err(CompositionError::UnknownAccountant(_))
    ));
}

/// A cancelled calibration gives no answer, from any accountant that searches, and `best`
/// does not answer with another method's result instead; the closed form (plain Gaussian,
/// nothing before) needs no search and still answers.
#[test]
fn a_cancelled_calibration_gives_no_answer() {
    let cancel = Cancel::new();
    cancel.cancel();
    let prefix = composition(&[release(MechanismKind::Gaussian, 40.0, 5.0)], AddRemove);
    let subsampled = POISSON;
    for choice in [
        Choice::Best,
        Choice::Only(Method::Pld),
        Choice::Only(Method::Rdp),
    ] {
        for (prefix, mechanism) in [
            (&prefix, MechanismKind::Gaussian),
            (&prefix, subsampled),
            (&composition(&[], AddRemove), subsampled),
        ] {
            let got = choice.calibrate(prefix, mechanism, 1000, (1.0, 1e-6), &cancel);
            assert!(
                matches!(got, Err(CompositionError::Cancelled)),
                "{choice:?} {mechanism:?}: {got:?}"
            );
        }
    }
    let none = composition(&[], Substitute);
    Choice::Best
        .calibrate(&none, MechanismKind::Gaussian, 1000, (1.0, 1e-6), &cancel)
        .unwrap();
}

/// DP Barker's noise is fixed by its total variance, so no accountant calibrates a
/// multiplier for it (any would "fit"): every choice refuses, under both relations.
#[test]
fn no_accountant_calibrates_dp_barker() {
    let barker = MechanismKind::DpBarker {
        batch: 100,
        population: 10_000,
    };
    for neighbours in [Substitute, AddRemove] {
        let none = composition(&[], neighbours);
        for choice in Method::ALL
            .iter()
            .map(|&m| Choice::Only(m))
            .chain([Choice::Best])
        {
            let got = choice.calibrate(&none, barker, 100, (1.0, 1e-6), &Cancel::new());
            assert!(
                matches!(got, Err(CompositionError::FixedNoise)),
                "{choice:?} {neighbours:?}: {got:?}"
            );
        }
    }
}
