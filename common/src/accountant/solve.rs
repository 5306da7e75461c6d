//! Root bracketing for the monotone curves of the accountants.

/// Bisects a monotone predicate down to adjacent floats. Requires `below(lo)`, `!below(hi)` and
/// finite 0 ≤ lo < hi; returns adjacent (lo, hi) with the same two properties. Going to the last
/// bit (≤ ~1100 evaluations even from lo = 0) means callers never need a tolerance.
pub(crate) fn boundary(mut lo: f64, mut hi: f64, below: impl Fn(f64) -> bool) -> (f64, f64) {
    loop {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            return (lo, hi);
        }
        if below(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
}

/// The next f64 above a positive finite `x` (`f64::next_up` needs Rust 1.86; the MSRV is 1.85).
pub(crate) fn next_up(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1)
}

/// The next f64 below a positive finite `x`.
pub(crate) fn next_down(x: f64) -> f64 {
    f64::from_bits(x.to_bits() - 1)
}
