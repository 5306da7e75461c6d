//! The DP Barker correction distribution V_corr against its definition: N(0, C) + V_corr must
//! have the Logistic(0, 1) CDF (Heikkilä et al. 2019; Räisä 2020, Sec. 3.3, Alg. 3), so that
//! accepting iff λ + N(0, C) + V_corr > 0 accepts with Barker's probability 1/(1 + e^{−λ}).
use fedmcmc_common::barker::{
    BarkerError, CorrectionFit, LOGISTIC_VARIANCE, SCAN_STEP, logistic_cdf,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// The committed values of C.
const COMMITTED_C: [f64; 3] = [0.5, 1.0, 2.0];

/// The largest sup-norm CDF error a committed fit may have.
const MAX_SUP_ERROR: f64 = 1e-3;

/// The λ grid of the acceptance simulation.
const LAMBDAS: [f64; 9] = [-4.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0];

/// Draws per λ: the standard error √(p(1 − p)/N) is at most 1.1e-3.
const DRAWS: usize = 200_000;

/// |z| bound: for 9 λ's and a few fits, a false alarm has probability below 1e-3.
const Z_BOUND: f64 = 4.0;

#[test]
fn committed_fits_reproduce_the_logistic_cdf() {
    assert_eq!(CorrectionFit::available().unwrap(), COMMITTED_C);
    for c in COMMITTED_C {
        let fit = CorrectionFit::load(c).unwrap();
        assert_eq!(fit.c, c);
        assert!(fit.weights.iter().all(|w| *w >= 0.0));
        let total: f64 = fit.weights.iter().sum();
        assert!(
            (total - 1.0).abs() < 1e-12,
            "C = {c}: weights sum to {total}"
        );
        assert!(
            fit.weights.len() <= 48,
            "C = {c}: {} components",
            fit.weights.len()
        );
        let err = fit.sup_error();
        println!(
            "C = {c}: {} components, sup |F − L| ≤ {:.3e} (grid max {:.3e} at x = {:.3}, \
             between points {:.1e}, tails {:.1e}); recorded {:.3e}",
            fit.weights.len(),
            err.bound,
            err.grid_max,
            err.argmax,
            err.between_points,
            err.tails,
            fit.sup_error
        );
        assert!(err.bound <= MAX_SUP_ERROR, "C = {c}: {:.3e}", err.bound);
        // The file states the error its fit achieves.
        assert!(
            (err.bound - fit.sup_error).abs() <= 1e-9 * err.bound,
            "C = {c}: recorded {:e}, recomputed {:e}",
            fit.sup_error,
            err.bound
        );
        // The fits are made with --match-variance: Var(V_corr) = π²/3 − C.
        assert!(
            (fit.variance() - (LOGISTIC_VARIANCE - c)).abs() < 1e-6,
            "C = {c}: Var(V_corr) = {}",
            fit.variance()
        );
    }
}

#[test]
fn the_scan_misses_nothing_between_its_points() {
    // Around each fit's worst point, a scan 20 times finer stays within the stated bound.
    for c in COMMITTED_C {
        let fit = CorrectionFit::load(c).unwrap();
        let err = fit.sup_error();
        let fine = SCAN_STEP / 20.0;
        let worst = (-2000..=2000)
            .map(|i| err.argmax + i as f64 * fine)
            .map(|x| (fit.convolved_cdf(x) - logistic_cdf(x)).abs())
            .fold(0.0, f64::max);
        assert!(worst >= err.grid_max && worst <= err.bound, "C = {c}");
    }
}

#[test]
fn the_sup_norm_check_rejects_a_plain_gaussian_correction() {
    // V_corr = N(0, π²/3 − C) has the right variance but N(0, π²/3) is not a logistic:
    // the check must see a CDF error far above the tolerance.
    let c = 1.0;
    let gaussian = CorrectionFit {
        c,
        weights: vec![1.0],
        means: vec![0.0],
        sds: vec![(LOGISTIC_VARIANCE - c).sqrt()],
        sup_error: f64::NAN,
        command: String::new(),
    };
    let err = gaussian.sup_error().bound;
    println!("plain Gaussian correction: sup |F − L| = {err:.3e}");
    assert!(err > 10.0 * MAX_SUP_ERROR, "{err:e}");
}

#[test]
fn an_uncommitted_or_impossible_c_is_refused() {
    match CorrectionFit::load(1.5) {
        Err(BarkerError::NoFit { c, available }) => {
            assert_eq!(c, 1.5);
            assert_eq!(available, COMMITTED_C);
        }
        other => panic!("{other:?}"),
    }
    for c in [LOGISTIC_VARIANCE, 4.0, 0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = CorrectionFit::load(c).unwrap_err();
        assert!(matches!(e, BarkerError::InvalidC(_)), "{c}: {e:?}");
        assert!(e.to_string().contains("π²/3"), "{e}");
    }
}

#[test]
fn malformed_fits_are_refused() {
    let file = |weights: &str, means: &str, sds: &str| {
        format!(
            r#"{{"c": 1.0, "weights": {weights}, "means": {means}, "sds": {sds},
                "sup_error": 0.1, "command": ""}}"#
        )
    };
    assert!(CorrectionFit::from_json("ok", &file("[0.5, 0.5]", "[-1, 1]", "[0.1, 0.1]")).is_ok());
    for (weights, means, sds) in [
        ("[0.5, 0.4]", "[-1, 1]", "[0.1, 0.1]"),
        ("[1.5, -0.5]", "[-1, 1]", "[0.1, 0.1]"),
        ("[0.5, 0.5]", "[-1]", "[0.1, 0.1]"),
        ("[0.5, 0.5]", "[-1, 1]", "[0.1, 0]"),
        ("[]", "[]", "[]"),
    ] {
        let e = CorrectionFit::from_json("bad", &file(weights, means, sds)).unwrap_err();
        assert!(matches!(e, BarkerError::Malformed { .. }), "{e:?}");
    }
    let e = CorrectionFit::from_json("c", &file("[1]", "[0]", "[0.1]").replace("1.0,", "3.5,"));
    assert!(matches!(e, Err(BarkerError::InvalidC(c)) if c == 3.5));
}

/// P̂(λ + N(0, C) + V > 0) over `DRAWS` draws, V drawn by `correction`.
fn acceptance_rate(
    lambda: f64,
    c: f64,
    rng: &mut ChaCha8Rng,
    correction: &dyn Fn(&mut ChaCha8Rng) -> f64,
) -> f64 {
    let sd = c.sqrt();
    let accepted = (0..DRAWS)
        .filter(|_| {
            let noise: f64 = StandardNormal.sample(rng);
            lambda + sd * noise + correction(rng) > 0.0
        })
        .count();
    accepted as f64 / DRAWS as f64
}

/// The largest |z| over the λ grid, where the allowance `deterministic` (the fit's own CDF
/// error) is taken off |p̂ − p| before dividing by the standard error.
fn worst_z(
    c: f64,
    seed: u64,
    deterministic: f64,
    correction: &dyn Fn(&mut ChaCha8Rng) -> f64,
) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut worst = 0.0f64;
    for lambda in LAMBDAS {
        let p = logistic_cdf(lambda);
        let se = (p * (1.0 - p) / DRAWS as f64).sqrt();
        let p_hat = acceptance_rate(lambda, c, &mut rng, correction);
        let z = ((p_hat - p).abs() - deterministic).max(0.0) / se;
        println!("C = {c}, λ = {lambda:>4}: p̂ = {p_hat:.5}, Barker {p:.5}, z = {z:.2}");
        worst = worst.max(z);
    }
    worst
}

#[test]
fn corrected_noisy_test_accepts_with_barker_probability() {
    for (i, c) in COMMITTED_C.into_iter().enumerate() {
        let fit = CorrectionFit::load(c).unwrap();
        let z = worst_z(c, 100 + i as u64, fit.sup_error, &|rng| fit.sample(rng));
        assert!(z < Z_BOUND, "C = {c}: worst |z| = {z:.2}");
    }
}

#[test]
fn the_acceptance_check_detects_a_plain_gaussian_correction() {
    // The same simulation with V_corr = N(0, π²/3 − C): right variance, wrong shape. It must
    // fail the bound the fits pass (its CDF error at λ = 2 is about 0.016, 20 standard errors).
    let c = 2.0;
    let sd = (LOGISTIC_VARIANCE - c).sqrt();
    let z = worst_z(c, 7, 0.0, &|rng| {
        let g: f64 = StandardNormal.sample(rng);
        sd * g
    });
    assert!(z > Z_BOUND, "worst |z| = {z:.2}");
}
