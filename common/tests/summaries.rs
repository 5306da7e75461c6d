//! The `summaries` route's noise-aware posterior is calibrated: its 50 % and 90 % intervals
//! cover the true coefficients at their nominal rates, where the plug-in posterior's do not.
//! (The full table over families, rows and ε: `examples/summaries_calibration.rs`.)
#[path = "support/summaries.rs"]
mod support;

use fedmcmc_common::models::Family;
use support::{Config, coverage};

#[test]
fn noise_aware_intervals_cover_at_their_nominal_rates_and_plug_in_ones_do_not() {
    let reps = 40;
    let config = Config {
        family: Family::Logistic,
        dim: 3,
        rows: 3_000,
        parties: 3,
        epsilon: 1.0,
        delta: 1e-5,
        seed: 11,
        prior_sd: Some(1.0),
    };
    let ([a50, a90, p50, p90], n, converged) = coverage(config, reps);
    eprintln!("aware {a50:.3} {a90:.3} plug-in {p50:.3} {p90:.3} over {n}, {converged} converged");
    assert_eq!(converged, reps as usize);
    // Binomial sd of a coverage over n intervals: √(p(1−p)/n); 3 of them, and the intervals
    // of one repetition are not independent, so the bound is loose by design.
    let band = |p: f64| 3.0 * (p * (1.0 - p) / n as f64).sqrt();
    assert!((a50 - 0.5).abs() < band(0.5), "noise-aware 50 %: {a50}");
    assert!((a90 - 0.9).abs() < band(0.9), "noise-aware 90 %: {a90}");
    assert!(p90 < 0.9 - band(0.9), "plug-in 90 %: {p90}");
}
