//! Four f64 lanes, the unit of work of the gradient kernel: written once against [`Lanes`],
//! compiled for an AVX2 register ([`Avx2`]) and for a plain array ([`Portable`]). Explicit
//! lanes because LLVM's vectorisers did not keep a row's gradient, norm and clip in registers
//! (they went through block buffers, each pass costing as much as the arithmetic) or
//! vectorised across the wrong axis.
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

pub(super) trait Lanes: Copy {
    fn splat(v: f64) -> Self;
    /// `x[0..4]`.
    fn load(x: &[f64]) -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// self·a + b: fused (one rounding) in the AVX2 copy, two roundings in the portable one.
    fn mul_add(self, a: Self, b: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn sqrt(self) -> Self;
    /// min(self, 1), and 1 in NaN lanes.
    fn min_one(self) -> Self;
    /// A mask: all bits set in the lanes where self ≤ t (not where either is NaN), clear
    /// elsewhere.
    fn le(self, t: Self) -> Self;
    /// self where `mask` is set, +0 elsewhere.
    fn and(self, mask: Self) -> Self;
    /// self where `mask` is clear, +0 elsewhere.
    fn and_not(self, mask: Self) -> Self;
    /// Bit l set iff lane l of the mask is.
    fn bits(self) -> u32;
    fn to_array(self) -> [f64; 4];

    /// The mask of the first `n` lanes.
    #[inline(always)]
    fn first(n: usize) -> Self {
        let set = f64::from_bits(u64::MAX);
        Self::load(&std::array::from_fn::<_, 4, _>(|l| {
            if l < n { set } else { 0.0 }
        }))
    }
}

/// Lane by lane, for CPUs without AVX2 and FMA.
#[derive(Clone, Copy)]
pub(super) struct Portable([f64; 4]);

impl Portable {
    #[inline(always)]
    fn zip(self, o: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        Portable(std::array::from_fn(|l| f(self.0[l], o.0[l])))
    }
}

/// A mask lane: all bits set or all clear.
fn mask_lane(set: bool) -> f64 {
    f64::from_bits(if set { u64::MAX } else { 0 })
}

impl Lanes for Portable {
    #[inline(always)]
    fn splat(v: f64) -> Self {
        Portable([v; 4])
    }
    #[inline(always)]
    fn load(x: &[f64]) -> Self {
        Portable(x[..4].try_into().expect("four lanes"))
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self.zip(o, |a, b| a + b)
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self.zip(o, |a, b| a * b)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        self.mul(a).add(b)
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        self.zip(o, |a, b| a / b)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        Portable(self.0.map(f64::sqrt))
    }
    #[inline(always)]
    fn min_one(self) -> Self {
        Portable(self.0.map(|v| if v < 1.0 { v } else { 1.0 }))
    }
    #[inline(always)]
    fn le(self, t: Self) -> Self {
        self.zip(t, |a, b| mask_lane(a <= b))
    }
    #[inline(always)]
    fn and(self, mask: Self) -> Self {
        self.zip(mask, |a, m| f64::from_bits(a.to_bits() & m.to_bits()))
    }
    #[inline(always)]
    fn and_not(self, mask: Self) -> Self {
        self.zip(mask, |a, m| f64::from_bits(a.to_bits() & !m.to_bits()))
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        (0..4)
            .map(|l| u32::from(self.0[l].is_sign_negative()) << l)
            .sum()
    }
    #[inline(always)]
    fn to_array(self) -> [f64; 4] {
        self.0
    }
}

/// An AVX2 register. Built only inside the kernel's `#[target_feature(enable = "avx2,fma")]`
/// copy, which runs only after the CPU has been checked for both features: that is what makes
/// the intrinsics below sound.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Avx2(__m256d);

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2 {
    #[inline(always)]
    fn splat(v: f64) -> Self {
        // SAFETY (here and below): see the type's documentation.
        unsafe { Avx2(_mm256_set1_pd(v)) }
    }
    #[inline(always)]
    fn load(x: &[f64]) -> Self {
        let x = &x[..4];
        unsafe { Avx2(_mm256_loadu_pd(x.as_ptr())) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        unsafe { Avx2(_mm256_add_pd(self.0, o.0)) }
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        unsafe { Avx2(_mm256_mul_pd(self.0, o.0)) }
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        unsafe { Avx2(_mm256_fmadd_pd(self.0, a.0, b.0)) }
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        unsafe { Avx2(_mm256_div_pd(self.0, o.0)) }
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        unsafe { Avx2(_mm256_sqrt_pd(self.0)) }
    }
    #[inline(always)]
    fn min_one(self) -> Self {
        // vminpd returns its second operand where either is NaN.
        unsafe { Avx2(_mm256_min_pd(self.0, _mm256_set1_pd(1.0))) }
    }
    #[inline(always)]
    fn le(self, t: Self) -> Self {
        unsafe { Avx2(_mm256_cmp_pd::<_CMP_LE_OQ>(self.0, t.0)) }
    }
    #[inline(always)]
    fn and(self, mask: Self) -> Self {
        unsafe { Avx2(_mm256_and_pd(self.0, mask.0)) }
    }
    #[inline(always)]
    fn and_not(self, mask: Self) -> Self {
        unsafe { Avx2(_mm256_andnot_pd(mask.0, self.0)) }
    }
    #[inline(always)]
    fn bits(self) -> u32 {
        unsafe { _mm256_movemask_pd(self.0) as u32 }
    }
    #[inline(always)]
    fn to_array(self) -> [f64; 4] {
        let mut out = [0.0; 4];
        unsafe { _mm256_storeu_pd(out.as_mut_ptr(), self.0) };
        out
    }
}
