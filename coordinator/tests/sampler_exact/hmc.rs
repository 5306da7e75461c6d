//! DP HMC: plain HMC in the non-private limit, and its target kept under large ratio and
//! gradient noise (plain and under secure aggregation).
use fedmcmc_common::models::ModelSpec;
use fedmcmc_coordinator::variant::Variant;

use crate::checks::{acceptance, assert_matches_exact, mean_noise_variance};
use crate::harness::{RW, Run, gaussian_10, sample, setup};

/// DP HMC with the thesis's L = 10, started at step size 1e-3 and adapted.
fn hmc(gradient_clip: f64, gradient_tau: f64) -> Variant {
    Variant::Hmc {
        leapfrog_steps: 10,
        step_size: 1e-3,
        gradient_clip,
        gradient_tau,
    }
}

/// DP HMC in the non-private limit (negligible ratio and gradient noise, clips that never
/// bind) is plain HMC: it must match the exact posterior, on the thesis's flat banana
/// (n = 10⁵) and on a 10-d Gaussian. (At n = 10⁴ the banana bends three times as far
/// relative to its width; its curvature grows like (2aθ1)² in the arms, where a step size
/// adapted in the centre is unstable, so chains from the centre rarely enter the arms: θ2's
/// sd came out 0.050 against 0.087 after 20 000 iterations. Plain HMC's weakness on
/// varying curvature, not the target's: random-walk penalty chains are tested there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hmc_in_the_non_private_limit_matches_the_exact_posterior() {
    for (name, spec, rows) in [
        ("flat banana d = 2", ModelSpec::flat_banana(2), 100_000),
        ("Gaussian d = 10", gaussian_10(), 10_000),
    ] {
        println!("{name}:");
        let s = setup(spec, rows, 11);
        let traces = sample(
            &s,
            Run {
                variant: hmc(1e3, 1e-6),
                proposal: RW,
                iterations: 2000,
                parties: 3,
                tau: 1e-6,
                clip: 1e3,
                proposal_sd: 0.0,
                adapt: true,
                penalise: true,
                seed: 47,
                secure: false,
            },
        )
        .await;
        println!(
            "acceptance {:.3}, Σσ_l² {:.2e}",
            acceptance(&traces),
            mean_noise_variance(&traces)
        );
        assert_matches_exact(name, &s, &traces);
    }
}

/// Räisä 2020, Sec. 4.3: noise in the gradients leaves the leapfrog reversible and
/// volume-preserving, and the −½Σσ_l² term corrects the ratio's noise, so with large
/// noise in both the target is unchanged and only the acceptance drops. On the 10-d
/// Gaussian (n = 10⁴), with a fixed step (0.002, L = 10: trajectories about two posterior
/// sds long) so that both runs see the same dynamics: gradient noise of sd about 200 per
/// coordinate, twice the gradient one posterior sd from the mode, and Σσ_l² above 1 (the
/// uncorrected chain's error at such noise is the penalty tests' negative control). The
/// chain still matches, at a lower acceptance than without noise. (With adaptation, large
/// gradient noise drives the step towards zero and the chain barely moves: the target is
/// kept, the mixing is not.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hmc_with_large_noise_keeps_its_target() {
    hmc_with_large_noise(false).await;
}

/// The same with secure aggregation: the ratio's and the gradients' noises are shared
/// with their own common multipliers (τ_g ≠ τ), and the chain still matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_secure_aggregation_hmc_with_large_noise_keeps_its_target() {
    hmc_with_large_noise(true).await;
}

async fn hmc_with_large_noise(secure: bool) {
    let s = setup(gaussian_10(), 10_000, 12);
    let run = |tau, gradient_tau| Run {
        variant: Variant::Hmc {
            leapfrog_steps: 10,
            step_size: 0.002,
            gradient_clip: 50.0,
            gradient_tau,
        },
        proposal: RW,
        iterations: 2000,
        parties: 3,
        tau,
        clip: 50.0,
        proposal_sd: 0.0,
        adapt: false,
        penalise: true,
        seed: 53,
        secure,
    };
    let quiet = sample(&s, run(1e-6, 1e-6)).await;
    let noisy = sample(&s, run(0.003, 0.02)).await;
    let (quiet_accept, noisy_accept) = (acceptance(&quiet), acceptance(&noisy));
    let noise = mean_noise_variance(&noisy);
    println!(
        "acceptance {quiet_accept:.3} without noise, {noisy_accept:.3} with Σσ_l² = {noise:.2}"
    );
    assert!(noise >= 1.0, "mean Σσ_l² = {noise}");
    assert!(noisy_accept < quiet_accept);
    assert_matches_exact("noisy hmc", &s, &noisy);
}
