//! zCDP accounting for Gaussian releases. A release with noise multiplier s is ρ = 1/(2s²)-zCDP
//! (Räisä 2020, Thm 2.11(2)), so ρ equals the PLD's μ; ρ's add under composition (Thm 2.7(3)); and
//! ρ-zCDP implies (ρ + 2√(ρ ln(1/δ)), δ)-DP (Thm 2.5). The conversion is loose, so this is kept
//! for comparison with the thesis's Thm 3.1 / 4.2 counts, never as the tighter choice.
use super::{AccountantError, check_delta, check_epsilon, check_mu};

/// ε of ρ-zCDP at δ (Räisä 2020, Thm 2.5): ρ + 2√(ρ ln(1/δ)).
pub fn epsilon(rho: f64, delta: f64) -> Result<f64, AccountantError> {
    check_mu(rho)?;
    check_delta(delta)?;
    Ok(epsilon_bound(rho, delta))
}

/// δ of ρ-zCDP at ε: Thm 2.5 solved for δ, exp(−(ε−ρ)²/(4ρ)) for ε > ρ and 1 (no guarantee)
/// otherwise.
pub fn delta(rho: f64, epsilon: f64) -> Result<f64, AccountantError> {
    check_mu(rho)?;
    check_epsilon(epsilon)?;
    Ok(delta_bound(rho, epsilon))
}

/// The largest ρ whose Thm 2.5 conversion fits (ε, δ) (Räisä 2020, Thm 3.1):
/// (√(ε − ln δ) − √(−ln δ))².
pub fn max_rho(epsilon: f64, delta: f64) -> Result<f64, AccountantError> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    Ok(max_rho_bound(epsilon, delta))
}

pub(crate) fn epsilon_bound(rho: f64, delta: f64) -> f64 {
    rho + 2.0 * (rho * -delta.ln()).sqrt()
}

pub(crate) fn delta_bound(rho: f64, epsilon: f64) -> f64 {
    if rho == 0.0 {
        0.0
    } else if epsilon > rho {
        let d = epsilon - rho;
        (-d * d / (4.0 * rho)).exp()
    } else {
        1.0
    }
}

/// Written as ε²/(√(ε+L) + √L)² with L = −ln δ, which is the same number without the
/// cancellation of the difference of square roots.
pub(crate) fn max_rho_bound(epsilon: f64, delta: f64) -> f64 {
    let l = -delta.ln();
    let d = (epsilon + l).sqrt() + l.sqrt();
    epsilon * epsilon / (d * d)
}
