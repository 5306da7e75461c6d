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
    largest_fitting(lo, hi, fits).map(Some)
}

/// The largest k in [lo, hi) with `fits(k)`, given that it holds at `lo`, fails at `hi`, and
/// once it fails keeps failing above: bisection.
pub fn largest_fitting<E>(
    mut lo: u64,
    mut hi: u64,
    mut fits: impl FnMut(u64) -> Result<bool, E>,
) -> Result<u64, E> {
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// The threshold of a predicate on (0, ∞) that fails below it and holds above (such as "the
/// releases fit with noise multiplier s"). `probe(s)` answers whether it holds at s, and a
/// continuous measure of by how much, decreasing in s (such as ln δ with multiplier s less
/// ln of the target δ), which only guides the search. Brackets the threshold by halving or
/// doubling from `start` within [1/`span`, `span`]·`start`, then narrows the bracket in ln s
/// by the Illinois variant of regula falsi, bisecting whenever the interpolation is
/// unusable, until hi/lo ≤ 1 + `tolerance`. A numerical accountant's measure is smooth only
/// down to its discretisation, so the last steps are bisection's; a PLD calibration of a
/// subsampled plan took 20–27 probes in all where bisection took about 33. Returns the upper end, where the predicate holds; `None` if it
/// fails even at the top.
pub(crate) fn first_fitting<E>(
    start: f64,
    span: f64,
    tolerance: f64,
    mut probe: impl FnMut(f64) -> Result<(bool, f64), E>,
) -> Result<Option<f64>, E> {
    let (mut lo, mut hi, mut w_lo, mut w_hi);
    let (fits, w) = probe(start)?;
    if fits {
        (hi, w_hi) = (start, w);
        loop {
            let down = hi / 2.0;
            let (fits, w) = probe(down)?;
            if !fits {
                (lo, w_lo) = (down, w);
                break;
            }
            if down < start / span {
                return Ok(Some(down));
            }
            (hi, w_hi) = (down, w);
        }
    } else {
        (lo, w_lo) = (start, w);
        loop {
            let up = 2.0 * lo;
            let (fits, w) = probe(up)?;
            if fits {
                (hi, w_hi) = (up, w);
                break;
            }
            if up > start * span {
                return Ok(None);
            }
            (lo, w_lo) = (up, w);
        }
    }
    // Illinois: when the same end moves twice running, the other end's weight is halved, so
    // that the interpolation closes in on it too.
    let (mut moved_hi, mut moved_lo) = (0u32, 0u32);
    while hi / lo > 1.0 + tolerance {
        let (a, b) = (lo.ln(), hi.ln());
        let secant = b - w_hi * (b - a) / (w_hi - w_lo);
        // Within the middle 98 % of the bracket, else a bisection step.
        let inside = a + 0.01 * (b - a) < secant && secant < b - 0.01 * (b - a);
        let mid = if inside { secant } else { (a + b) / 2.0 }.exp();
        if mid <= lo || mid >= hi {
            break;
        }
        let (fits, w) = probe(mid)?;
        if fits {
            (hi, w_hi) = (mid, w);
            (moved_hi, moved_lo) = (moved_hi + 1, 0);
            if moved_hi >= 2 {
                w_lo /= 2.0;
            }
        } else {
            (lo, w_lo) = (mid, w);
            (moved_lo, moved_hi) = (moved_lo + 1, 0);
            if moved_lo >= 2 {
                w_hi /= 2.0;
            }
        }
    }
    Ok(Some(hi))
}
