//! Checks `fedmcmc_common::diagnostics` against ArviZ (reference values committed in
//! `tests/data/diagnostics_reference.json`, made by `gen_diagnostics_reference.py`) and the
//! MMD against a naive implementation and its population value.

use fedmcmc_common::diagnostics::{
    DiagnosticsError, ess_bulk, ess_tail, mmd, mmd2_unbiased, quantile, rhat, summary,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    arviz_version: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    chains: Vec<Vec<f64>>,
    rhat: f64,
    ess_bulk: f64,
    ess_tail: f64,
    mean: f64,
    sd: f64,
    q5: f64,
    q50: f64,
    q95: f64,
}

fn reference() -> Reference {
    let text = include_str!("data/diagnostics_reference.json");
    serde_json::from_str(text).expect("reference JSON parses")
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// R̂ to 1e-6 absolute, ESS to 1e-6 relative; mean/sd/quantiles to 1e-12 relative (they
/// differ from numpy only by summation order).
#[test]
fn matches_arviz() {
    let reference = reference();
    let (mut max_rhat, mut max_bulk, mut max_tail) = (0.0f64, 0.0f64, 0.0f64);
    for case in &reference.cases {
        let s = summary(&case.chains).unwrap();
        let name = &case.name;
        assert!(
            (s.rhat - case.rhat).abs() < 1e-6,
            "{name}: rhat {} vs {}",
            s.rhat,
            case.rhat
        );
        assert!(
            rel(s.ess_bulk, case.ess_bulk) < 1e-6,
            "{name}: bulk {} vs {}",
            s.ess_bulk,
            case.ess_bulk
        );
        assert!(
            rel(s.ess_tail, case.ess_tail) < 1e-6,
            "{name}: tail {} vs {}",
            s.ess_tail,
            case.ess_tail
        );
        assert!((s.mean - case.mean).abs() < 1e-12 * case.sd, "{name}: mean");
        assert!(rel(s.sd, case.sd) < 1e-12, "{name}: sd");
        for (got, want) in [(s.q5, case.q5), (s.q50, case.q50), (s.q95, case.q95)] {
            assert!(
                (got - want).abs() <= 1e-12 * want.abs(),
                "{name}: quantile {got} vs {want}"
            );
        }
        max_rhat = max_rhat.max((s.rhat - case.rhat).abs());
        max_bulk = max_bulk.max(rel(s.ess_bulk, case.ess_bulk));
        max_tail = max_tail.max(rel(s.ess_tail, case.ess_tail));
    }
    println!(
        "ArviZ {}: max |Δrhat| = {max_rhat:e}, max rel Δess_bulk = {max_bulk:e}, \
         max rel Δess_tail = {max_tail:e}",
        reference.arviz_version
    );
}

#[test]
fn accepts_slices_of_slices() {
    let case = &reference().cases[0];
    let slices: Vec<&[f64]> = case.chains.iter().map(Vec::as_slice).collect();
    assert_eq!(rhat(&slices).unwrap(), rhat(&case.chains).unwrap());
    assert_eq!(ess_bulk(&slices).unwrap(), ess_bulk(&case.chains).unwrap());
    assert_eq!(ess_tail(&slices).unwrap(), ess_tail(&case.chains).unwrap());
}

#[test]
fn rejects_bad_chains() {
    let none: &[Vec<f64>] = &[];
    assert_eq!(rhat(none), Err(DiagnosticsError::NoChains));
    let ragged = vec![vec![0.0, 1.0, 2.0, 3.0], vec![0.0, 1.0, 2.0]];
    assert_eq!(
        ess_bulk(&ragged),
        Err(DiagnosticsError::RaggedChains {
            index: 1,
            len: 3,
            expected: 4
        })
    );
    assert_eq!(
        ess_tail(&[[0.0, 1.0, 2.0]]),
        Err(DiagnosticsError::TooFewDraws { got: 3 })
    );
    assert_eq!(
        summary(&[[0.0, f64::NAN, 2.0, 3.0]]),
        Err(DiagnosticsError::NonFinite)
    );
}

/// ArviZ's convention: constant draws have ESS equal to the draw count.
#[test]
fn constant_chains_have_full_ess() {
    let chains = vec![vec![2.5; 10]; 3];
    assert_eq!(ess_bulk(&chains).unwrap(), 30.0);
    assert_eq!(ess_tail(&chains).unwrap(), 30.0);
    assert!(rhat(&chains).unwrap().is_nan());
}

/// Chains that never move, each at its own value, have R̂ = ∞ (as ArviZ says), not the
/// 10¹⁴ that a mean's last-bit rounding left as "within-chain variance".
#[test]
fn stuck_chains_have_infinite_rhat() {
    let chains: Vec<Vec<f64>> = [0.1, 0.7, 1.3, 2.9]
        .iter()
        .map(|&v| vec![v; 1000])
        .collect();
    assert_eq!(rhat(&chains).unwrap(), f64::INFINITY);
}

#[test]
fn quantile_is_numpy_linear() {
    // np.quantile([3, 1, 4, 1, 5], [0, 0.3, 0.5, 0.95, 1]) = [1, 1.4, 3, 4.8, 5]
    let x = [3.0, 1.0, 4.0, 1.0, 5.0];
    let got: Vec<f64> = [0.0, 0.3, 0.5, 0.95, 1.0]
        .iter()
        .map(|&p| quantile(&x, p))
        .collect();
    let want = [1.0, 1.4, 3.0, 4.8, 5.0];
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-15, "{got:?} vs {want:?}");
    }
}

fn normal_sample(rng: &mut ChaCha8Rng, n: usize, shift: &[f64]) -> Vec<Vec<f64>> {
    (0..n)
        .map(|_| {
            shift
                .iter()
                .map(|s| s + Distribution::<f64>::sample(&StandardNormal, rng))
                .collect::<Vec<f64>>()
        })
        .collect()
}

/// Direct O(n²) evaluation from full kernel matrices.
fn naive_mmd2(a: &[Vec<f64>], b: &[Vec<f64>], sigma: f64) -> f64 {
    let k = |x: &Vec<f64>, y: &Vec<f64>| {
        let d2: f64 = x.iter().zip(y).map(|(u, v)| (u - v).powi(2)).sum();
        (-d2 / (2.0 * sigma * sigma)).exp()
    };
    let gram = |s: &[Vec<f64>], t: &[Vec<f64>]| -> Vec<Vec<f64>> {
        s.iter()
            .map(|x| t.iter().map(|y| k(x, y)).collect())
            .collect()
    };
    let off_diagonal_mean = |g: Vec<Vec<f64>>| {
        let n = g.len();
        let total: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| g[i][j])
            .sum();
        total / (n * (n - 1)) as f64
    };
    let kab = gram(a, b);
    let cross = kab.iter().flatten().sum::<f64>() / (a.len() * b.len()) as f64;
    off_diagonal_mean(gram(a, a)) + off_diagonal_mean(gram(b, b)) - 2.0 * cross
}

#[test]
fn mmd2_matches_naive() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let a = normal_sample(&mut rng, 120, &[0.0, 0.0, 0.0]);
    let b = normal_sample(&mut rng, 90, &[0.3, 0.0, -0.2]);
    for sigma in [0.5, 1.7, 4.0] {
        let fast = mmd2_unbiased(&a, &b, sigma).unwrap();
        let naive = naive_mmd2(&a, &b, sigma);
        assert!(
            (fast - naive).abs() < 1e-12,
            "sigma {sigma}: {fast} vs {naive}"
        );
    }
}

/// Unbiasedness: over independent replicates at a fixed σ, the mean MMD² must match the
/// population value 2(σ²/(σ²+2))^{d/2}(1 − exp(−‖μ‖²/(2(σ²+2)))) for N(0, I) vs N(μ, I),
/// within 4 standard errors estimated from the replicates.
#[test]
fn mmd2_is_unbiased() {
    let (n, d, reps, sigma) = (200, 2, 12, 1.5f64);
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for mu in [[0.0, 0.0], [0.8, 0.0]] {
        let values: Vec<f64> = (0..reps)
            .map(|_| {
                mmd2_unbiased(
                    &normal_sample(&mut rng, n, &[0.0; 2]),
                    &normal_sample(&mut rng, n, &mu),
                    sigma,
                )
                .unwrap()
            })
            .collect();
        let mean = values.iter().sum::<f64>() / reps as f64;
        let sd =
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (reps - 1) as f64).sqrt();
        let s2 = sigma * sigma;
        let mu2: f64 = mu.iter().map(|m| m * m).sum();
        let population = 2.0
            * (s2 / (s2 + 2.0)).powf(d as f64 / 2.0)
            * (1.0 - (-mu2 / (2.0 * (s2 + 2.0))).exp());
        let se = sd / (reps as f64).sqrt();
        assert!(
            (mean - population).abs() < 4.0 * se,
            "mu {mu:?}: mean {mean}, population {population}, se {se}"
        );
    }
}

/// Same distribution: √|MMD²| is of order n^(-1/2) (≈ 0.04 here). A unit shift in one
/// coordinate gives a population √MMD² ≈ 0.3 at the median-heuristic bandwidth (σ ≈ 1.7).
#[test]
fn mmd_separates_shifted_samples() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let a = normal_sample(&mut rng, 400, &[0.0, 0.0]);
    let b = normal_sample(&mut rng, 400, &[0.0, 0.0]);
    let c = normal_sample(&mut rng, 400, &[1.0, 0.0]);
    let same = mmd(&a, &b, &mut rng).unwrap();
    let shifted = mmd(&a, &c, &mut rng).unwrap();
    println!("mmd same = {same}, shifted = {shifted}");
    assert!(same < 0.1, "same-distribution MMD {same}");
    assert!(
        shifted > 0.2 && shifted > 3.0 * same,
        "shifted MMD {shifted} vs same {same}"
    );
}

#[test]
fn mmd_rejects_bad_samples() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let two = vec![vec![0.0, 1.0], vec![1.0, 0.0]];
    assert_eq!(
        mmd(&two, &two[..1], &mut rng),
        Err(DiagnosticsError::TooFewPoints { got: 1 })
    );
    let wrong_dim = vec![vec![0.0], vec![1.0]];
    assert_eq!(
        mmd(&two, &wrong_dim, &mut rng),
        Err(DiagnosticsError::DimensionMismatch {
            got: 1,
            expected: 2
        })
    );
    let same_point = vec![vec![1.0, 1.0]; 3];
    assert!(matches!(
        mmd(&same_point, &same_point, &mut rng),
        Err(DiagnosticsError::DegenerateBandwidth(_))
    ));
}
