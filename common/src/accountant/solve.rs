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

/// The largest integer k with `fits(k)` for a predicate that holds at 0 and, once it fails,
/// keeps failing (Räisä 2020, Alg. 2 on integer counts): doubles from 1 until it fails, then
/// bisects, so the answer has fits(k) and !fits(k + 1) with ~2·log₂k evaluations. `None` when
/// it still holds at `limit`.
pub(crate) fn last_fitting<E>(
    limit: u64,
    mut fits: impl FnMut(u64) -> Result<bool, E>,
) -> Result<Option<u64>, E> {
    let (mut lo, mut hi) = (0, 1);
    while fits(hi)? {
        if hi >= limit {
            return Ok(None);
        }
        lo = hi;
        hi = hi.saturating_mul(2).min(limit);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// The threshold of a predicate on (0, ∞) that fails below it and holds above (such as "the
/// releases fit with noise multiplier s"): brackets it by halving or doubling from `start`
/// within [1/`span`, `span`]·`start`, then bisects geometrically until hi/lo ≤ 1 + `tolerance`.
/// Returns the upper end, where the predicate holds; `None` if it fails even at the top.
pub(crate) fn first_fitting<E>(
    start: f64,
    span: f64,
    tolerance: f64,
    mut fits: impl FnMut(f64) -> Result<bool, E>,
) -> Result<Option<f64>, E> {
    let (mut lo, mut hi);
    if fits(start)? {
        (lo, hi) = (start / 2.0, start);
        while fits(lo)? {
            if lo < start / span {
                return Ok(Some(lo));
            }
            (lo, hi) = (lo / 2.0, lo);
        }
    } else {
        (lo, hi) = (start, 2.0 * start);
        while !fits(hi)? {
            if hi > start * span {
                return Ok(None);
            }
            (lo, hi) = (hi, 2.0 * hi);
        }
    }
    while hi / lo > 1.0 + tolerance {
        let mid = (lo * hi).sqrt();
        if fits(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}
