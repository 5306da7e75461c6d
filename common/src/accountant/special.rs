//! Tail functions for the Gaussian privacy-loss distribution, accurate where `erfc` underflows.
//!
//! The tight δ(ε) is a difference of two Gaussian tails that are each far below 1e-300 for the
//! budgets parties actually use, so they are handled as `e^{-x²}` times the scaled
//! complementary error function erfcx(x) = e^{x²}·erfc(x), which stays of order 1/x.

/// 1/√π.
const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_3;

/// Below this, erfcx = e^{x²}·erfc(x) with libm's erfc (a few ulp; erfc(26) ≈ 2e-296 is still a
/// normal number). At and above it the continued fraction converges to full precision.
const CF_FROM: f64 = 26.0;

/// Terms of the continued fraction; at x ≥ 26 it has converged to machine precision long before.
const CF_TERMS: u32 = 24;

/// Splits `x` into a head of at most 26 significant bits, whose square is exact in f64, and the
/// exact remainder, so that x² is available as head² + tail without rounding error in the
/// large part (exp(x²) otherwise loses x²·2⁻⁵³ relative accuracy, ~1e-13 at x = 26).
fn split(x: f64) -> (f64, f64) {
    let head = f64::from_bits(x.to_bits() & 0xFFFF_FFFF_F800_0000);
    (head, x - head)
}

/// e^{x²} to a few ulp for finite x.
fn exp_sq(x: f64) -> f64 {
    let (h, t) = split(x);
    libm::exp(h * h) * libm::exp(t * (h + x))
}

/// e^{-x²} to a few ulp for finite x (gradual underflow below ~1e-308 aside).
pub(crate) fn exp_neg_sq(x: f64) -> f64 {
    let (h, t) = split(x);
    libm::exp(-h * h) * libm::exp(-t * (h + x))
}

/// Scaled complementary error function erfcx(x) = e^{x²}·erfc(x) for x ≥ 0 (NaN otherwise).
/// Relative error a few ulp over the whole range, including x = ∞ (0).
pub(crate) fn erfcx(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        f64::NAN
    } else if x < CF_FROM {
        exp_sq(x) * libm::erfc(x)
    } else {
        // Laplace's continued fraction: erfcx(x) = (1/√π) / (x + (1/2)/(x + (2/2)/(x + (3/2)/(x + …)))).
        let mut f = x;
        for n in (1..=CF_TERMS).rev() {
            f = x + f64::from(n) / 2.0 / f;
        }
        FRAC_1_SQRT_PI / f
    }
}

unsafe extern "C" {
    /// The C library's erfc (C99 `<math.h>`, in the libm every Rust program on a Unix links):
    /// the same algorithm as `libm::erfc` (Sun's), on the platform's vectorised exp, three
    /// times faster; a PLD discretisation spends a third of its time here.
    #[link_name = "erfc"]
    pub(crate) safe fn c_erfc(x: f64) -> f64;
}

/// ln erfc(x) for x ≥ 0: below the switch erfc(x) is a normal number and its logarithm is
/// taken directly (two exponentials fewer than through erfcx); above it, ln erfcx(x) − x².
pub(crate) fn ln_erfc(x: f64) -> f64 {
    if x < CF_FROM {
        c_erfc(x).ln()
    } else {
        erfcx(x).ln() - x * x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfcx_matches_mpmath_on_both_sides_of_the_switch() {
        // (x, erfcx(x)) from mpmath at 40 digits, rounded to the nearest f64.
        let cases = [
            (0.0, 1.0),
            (1.0, 0.427_583_576_155_807),
            (5.0, 0.110_704_637_733_068_63),
            (25.999_999_999_999, 0.021_683_584_850_563_736),
            (26.0, 0.021_683_584_850_562_907),
            (30.0, 0.018_795_888_861_416_75),
            (100.0, 0.005_641_613_782_989_433),
        ];
        for (x, want) in cases {
            let got = erfcx(x);
            assert!(
                (got / want - 1.0).abs() < 4e-16,
                "erfcx({x}) = {got}, want {want}"
            );
        }
        assert_eq!(erfcx(f64::INFINITY), 0.0);
        assert!(erfcx(-1.0).is_nan());
    }

    #[test]
    fn ln_erfc_is_continuous_at_the_switch_and_matches_mpmath() {
        // ln erfc(10) = -102.87988902484489 (mpmath, 40 digits).
        assert!((ln_erfc(10.0) + 102.879_889_024_844_89).abs() < 1e-13);
        let (below, above) = (ln_erfc(CF_FROM - 1e-12), ln_erfc(CF_FROM));
        assert!((below - above).abs() < 1e-9, "{below} {above}");
    }
}
