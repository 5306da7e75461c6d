//! Arithmetic in Z_2^128, where contributions are masked and summed. Wrapping addition is
//! the ring's addition, so the pairwise masks cancel exactly; the sum decodes to the true
//! integer sum as long as that sum lies in i128's range ([`sum_fits`]).
use super::SecureError;

/// A signed contribution as a ring element (two's complement).
pub fn encode(value: i128) -> u128 {
    value as u128
}

/// Adds `mask` (from [`super::PairwiseMasks::mask`]) to the encoded values in place.
///
/// # Panics
/// If the lengths differ: a mask is drawn for the values it masks.
pub fn apply(values: &mut [u128], mask: &[u128]) {
    assert_eq!(
        values.len(),
        mask.len(),
        "a mask must have one entry per value"
    );
    for (v, m) in values.iter_mut().zip(mask) {
        *v = v.wrapping_add(*m);
    }
}

/// The integer sums, entry by entry, of every party's masked contribution: the masks cancel,
/// and the ring sum read as two's complement is the true sum when [`sum_fits`] held for the
/// parties' bounds. Refuses contributions of different lengths.
pub fn decode_sum(contributions: &[Vec<u128>]) -> Result<Vec<i128>, SecureError> {
    let Some(first) = contributions.first() else {
        return Ok(Vec::new());
    };
    let mut sum = vec![0u128; first.len()];
    for (index, c) in contributions.iter().enumerate() {
        if c.len() != sum.len() {
            return Err(SecureError::LengthMismatch {
                index,
                got: c.len(),
                expected: sum.len(),
            });
        }
        apply(&mut sum, c);
    }
    Ok(sum.into_iter().map(|s| s as i128).collect())
}

/// Whether contributions bounded in absolute value by `bound_per_party` (one bound per
/// party) always decode to their exact sum: |Σ xᵢ| ≤ Σ boundᵢ, and the decoding is exact
/// when that is below 2^127. The integrator picks the fixed-point scale and the noise's
/// tail bound so that this holds, before any party masks anything.
pub fn sum_fits(bound_per_party: &[u128]) -> bool {
    bound_per_party
        .iter()
        .try_fold(0u128, |total, b| total.checked_add(*b))
        .is_some_and(|total| total < 1 << 127)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_and_decode_round_trip_at_the_extremes() {
        for v in [0, 1, -1, 12345, -(1 << 100), i128::MAX, i128::MIN] {
            assert_eq!(decode_sum(&[vec![encode(v)]]).unwrap(), vec![v]);
        }
        let sums = decode_sum(&[
            vec![encode(i128::MAX), encode(-5)],
            vec![encode(-1), encode(-7)],
        ])
        .unwrap();
        assert_eq!(sums, vec![i128::MAX - 1, -12]);
    }

    #[test]
    fn sums_beyond_the_ring_wrap_and_sum_fits_says_so() {
        let half = 1u128 << 126;
        assert!(sum_fits(&[half - 1, half]));
        assert!(!sum_fits(&[half, half]));
        assert!(!sum_fits(&[u128::MAX, 1]));
        assert!(sum_fits(&[]));
        // Two contributions of 2^126 sum to 2^127, which reads back negative: why the check.
        let wrapped = decode_sum(&[vec![encode(1 << 126)], vec![encode(1 << 126)]]).unwrap();
        assert_eq!(wrapped, vec![i128::MIN]);
        // At the bound the extremes are exact.
        let lo = -((half - 1) as i128);
        let exact = decode_sum(&[vec![encode(lo)], vec![encode(-(half as i128))]]).unwrap();
        assert_eq!(exact, vec![lo - half as i128]);
    }

    #[test]
    fn contributions_of_different_lengths_are_refused() {
        assert_eq!(
            decode_sum(&[vec![1, 2], vec![3, 4], vec![5]]).unwrap_err(),
            SecureError::LengthMismatch {
                index: 2,
                got: 1,
                expected: 2
            }
        );
        assert_eq!(decode_sum(&[]).unwrap(), Vec::<i128>::new());
    }
}
