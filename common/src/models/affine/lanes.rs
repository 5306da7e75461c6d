//! A register of f64 lanes, the unit of work of the hot loops: written once against
//! [`Lanes`], compiled for an AVX-512 register ([`Avx512`], eight lanes), an AVX2 one
//! ([`Avx2`], four) and a plain array ([`Portable`], four). Explicit lanes because LLVM's
//! vectorisers did not keep a row's gradient, norm and clip in registers (they went through
//! block buffers, each pass costing as much as the arithmetic) or vectorised across the wrong
//! axis.
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The most lanes of any copy: sizes the kernel's buffers, which cannot depend on `W`.
pub(super) const MAX_LANES: usize = 8;

pub(super) trait Lanes: Copy {
    /// Lanes per register.
    const W: usize;
    /// A set of lanes: a vector of all-set or all-clear lanes, or an AVX-512 mask register.
    type Mask: Copy;
    fn splat(v: f64) -> Self;
    /// `x[0..W]`.
    fn load(x: &[f64]) -> Self;
    /// Into `out[0..W]`.
    fn store(self, out: &mut [f64]);
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// self·a + b: fused (one rounding) in the AVX copies, two roundings in the portable one.
    fn mul_add(self, a: Self, b: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn sqrt(self) -> Self;
    /// b/√self for self in [2⁻¹⁰⁰⁰, f64::MAX], within 4 ulps: a root and a division here; the
    /// AVX-512 copy refines a hardware estimate, several times cheaper. Lanes outside that
    /// range (0, subnormal, ∞, NaN) hold anything.
    #[inline(always)]
    fn div_sqrt(self, b: Self) -> Self {
        b.div(self.sqrt())
    }
    /// min(self, 1), and 1 in NaN lanes.
    fn min_one(self) -> Self;
    /// [`crate::clip::clip`] in each lane, `low` = −bound and `high` = bound: low unless self is
    /// above it (so NaN becomes low), then high unless that is below it.
    fn clip(self, low: Self, high: Self) -> Self;
    /// The lanes where self ≤ t (not where either is NaN).
    fn le(self, t: Self) -> Self::Mask;
    /// The lanes where self ≠ t (and where either is NaN).
    fn ne(self, t: Self) -> Self::Mask;
    /// self in the lanes of `mask`, +0 elsewhere.
    fn select(self, mask: Self::Mask) -> Self;
    /// self + o in the lanes of `mask`, self elsewhere.
    #[inline(always)]
    fn add_in(self, o: Self, mask: Self::Mask) -> Self {
        self.add(o.select(mask))
    }
    /// The first `n` lanes.
    fn first(n: usize) -> Self::Mask;
    /// The lanes in both masks.
    fn both(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    /// Bit l set iff lane l is in the mask.
    fn bits(mask: Self::Mask) -> u32;
    /// The lanes whose bit is set in `bits`, in order, then any values.
    fn pack(self, bits: u32) -> Self;
    /// The sum of the lanes.
    fn sum(self) -> f64;
}

/// For each four-bit mask, the lanes whose bit is set, in order, then the others: the moves
/// of [`Lanes::pack`] for four lanes.
const PACK: [[usize; 4]; 16] = {
    let mut table = [[0; 4]; 16];
    let mut bits = 0;
    while bits < 16 {
        let (mut front, mut back) = (0, 4);
        let mut lane = 0;
        while lane < 4 {
            if (bits >> lane) & 1 == 1 {
                table[bits][front] = lane;
                front += 1;
            } else {
                back -= 1;
                table[bits][back] = lane;
            }
            lane += 1;
        }
        bits += 1;
    }
    table
};

/// Lane by lane, for CPUs without AVX2 and FMA.
#[derive(Clone, Copy)]
pub(super) struct Portable([f64; 4]);

impl Portable {
    #[inline(always)]
    fn zip(self, o: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        Portable(std::array::from_fn(|l| f(self.0[l], o.0[l])))
    }
}

impl Lanes for Portable {
    const W: usize = 4;
    type Mask = [bool; 4];
    #[inline(always)]
    fn splat(v: f64) -> Self {
        Portable([v; 4])
    }
    #[inline(always)]
    fn load(x: &[f64]) -> Self {
        Portable(x[..4].try_into().expect("four lanes"))
    }
    #[inline(always)]
    fn store(self, out: &mut [f64]) {
        out[..4].copy_from_slice(&self.0);
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
    fn clip(self, low: Self, high: Self) -> Self {
        self.zip(low, |v, low| if v > low { v } else { low })
            .zip(high, |v, high| if v < high { v } else { high })
    }
    #[inline(always)]
    fn le(self, t: Self) -> [bool; 4] {
        std::array::from_fn(|l| self.0[l] <= t.0[l])
    }
    #[inline(always)]
    fn ne(self, t: Self) -> [bool; 4] {
        std::array::from_fn(|l| self.0[l] != t.0[l])
    }
    #[inline(always)]
    fn select(self, mask: [bool; 4]) -> Self {
        Portable(std::array::from_fn(
            |l| if mask[l] { self.0[l] } else { 0.0 },
        ))
    }
    #[inline(always)]
    fn first(n: usize) -> [bool; 4] {
        std::array::from_fn(|l| l < n)
    }
    #[inline(always)]
    fn both(a: [bool; 4], b: [bool; 4]) -> [bool; 4] {
        std::array::from_fn(|l| a[l] && b[l])
    }
    #[inline(always)]
    fn bits(mask: [bool; 4]) -> u32 {
        (0..4).map(|l| u32::from(mask[l]) << l).sum()
    }
    #[inline(always)]
    fn pack(self, bits: u32) -> Self {
        Portable(PACK[bits as usize].map(|l| self.0[l]))
    }
    #[inline(always)]
    fn sum(self) -> f64 {
        self.0.iter().sum()
    }
}

/// [`PACK`] as the 32-bit lane indices of `vpermps` (a double is two of them).
#[cfg(target_arch = "x86_64")]
const PACK_32: [[i32; 8]; 16] = {
    let mut table = [[0; 8]; 16];
    let mut bits = 0;
    while bits < 16 {
        let mut i = 0;
        while i < 8 {
            table[bits][i] = (2 * PACK[bits][i / 2] + i % 2) as i32;
            i += 1;
        }
        bits += 1;
    }
    table
};

/// An AVX2 register. Built only inside the kernels' `#[target_feature(enable =
/// "avx2,fma,popcnt")]` copies, which run only after the CPU has been checked for those
/// features: that is what makes the intrinsics below sound.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Avx2(__m256d);

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2 {
    const W: usize = 4;
    /// All bits set in the lanes of the mask.
    type Mask = __m256d;
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
    fn store(self, out: &mut [f64]) {
        let out = &mut out[..4];
        unsafe { _mm256_storeu_pd(out.as_mut_ptr(), self.0) }
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
    fn clip(self, low: Self, high: Self) -> Self {
        // vmaxpd and vminpd return their second operand unless the first is above (below) it.
        unsafe { Avx2(_mm256_min_pd(_mm256_max_pd(self.0, low.0), high.0)) }
    }
    #[inline(always)]
    fn le(self, t: Self) -> __m256d {
        unsafe { _mm256_cmp_pd::<_CMP_LE_OQ>(self.0, t.0) }
    }
    #[inline(always)]
    fn ne(self, t: Self) -> __m256d {
        unsafe { _mm256_cmp_pd::<_CMP_NEQ_UQ>(self.0, t.0) }
    }
    #[inline(always)]
    fn select(self, mask: __m256d) -> Self {
        unsafe { Avx2(_mm256_and_pd(self.0, mask)) }
    }
    #[inline(always)]
    fn first(n: usize) -> __m256d {
        let set = f64::from_bits(u64::MAX);
        let lanes: [f64; 4] = std::array::from_fn(|l| if l < n { set } else { 0.0 });
        unsafe { _mm256_loadu_pd(lanes.as_ptr()) }
    }
    #[inline(always)]
    fn both(a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_and_pd(a, b) }
    }
    #[inline(always)]
    fn bits(mask: __m256d) -> u32 {
        unsafe { _mm256_movemask_pd(mask) as u32 }
    }
    #[inline(always)]
    fn pack(self, bits: u32) -> Self {
        let moves = &PACK_32[bits as usize];
        unsafe {
            let moves = _mm256_loadu_si256(moves.as_ptr().cast());
            let packed = _mm256_permutevar8x32_ps(_mm256_castpd_ps(self.0), moves);
            Avx2(_mm256_castps_pd(packed))
        }
    }
    #[inline(always)]
    fn sum(self) -> f64 {
        let mut lanes = [0.0; 4];
        self.store(&mut lanes);
        lanes.iter().sum()
    }
}

/// An AVX-512 register, with its masks in mask registers. Built only inside the kernels'
/// `#[target_feature(enable = "avx512f,popcnt")]` copies, which run only after the CPU has
/// been checked for both features: that is what makes the intrinsics below sound.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Avx512(__m512d);

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx512 {
    const W: usize = 8;
    type Mask = __mmask8;
    #[inline(always)]
    fn splat(v: f64) -> Self {
        // SAFETY (here and below): see the type's documentation.
        unsafe { Avx512(_mm512_set1_pd(v)) }
    }
    #[inline(always)]
    fn load(x: &[f64]) -> Self {
        let x = &x[..8];
        unsafe { Avx512(_mm512_loadu_pd(x.as_ptr())) }
    }
    #[inline(always)]
    fn store(self, out: &mut [f64]) {
        let out = &mut out[..8];
        unsafe { _mm512_storeu_pd(out.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        unsafe { Avx512(_mm512_add_pd(self.0, o.0)) }
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        unsafe { Avx512(_mm512_mul_pd(self.0, o.0)) }
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        unsafe { Avx512(_mm512_fmadd_pd(self.0, a.0, b.0)) }
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        unsafe { Avx512(_mm512_div_pd(self.0, o.0)) }
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        unsafe { Avx512(_mm512_sqrt_pd(self.0)) }
    }
    /// vrsqrt14pd's estimate y₀ of 1/√s (relative error below 2⁻¹⁴), then two Newton steps
    /// y ← y + ½·y·(1 − (s·y)·y), each squaring the error (2⁻²⁸, then rounding's few ulps);
    /// s·y is formed first so nothing overflows for s up to f64::MAX. Nine cheap instructions
    /// against a vsqrtpd and a vdivpd, which on this machine cost more than the rest of a
    /// clipped row together (measured with `benches/llr_rows.rs`).
    #[inline(always)]
    fn div_sqrt(self, b: Self) -> Self {
        unsafe {
            let (s, half) = (self.0, _mm512_set1_pd(0.5));
            let mut y = _mm512_rsqrt14_pd(s);
            for _ in 0..2 {
                let r = _mm512_fnmadd_pd(_mm512_mul_pd(s, y), y, _mm512_set1_pd(1.0));
                y = _mm512_fmadd_pd(_mm512_mul_pd(half, y), r, y);
            }
            Avx512(_mm512_mul_pd(b.0, y))
        }
    }
    #[inline(always)]
    fn min_one(self) -> Self {
        // vminpd returns its second operand where either is NaN.
        unsafe { Avx512(_mm512_min_pd(self.0, _mm512_set1_pd(1.0))) }
    }
    #[inline(always)]
    fn clip(self, low: Self, high: Self) -> Self {
        // vmaxpd and vminpd return their second operand unless the first is above (below) it.
        unsafe { Avx512(_mm512_min_pd(_mm512_max_pd(self.0, low.0), high.0)) }
    }
    #[inline(always)]
    fn le(self, t: Self) -> __mmask8 {
        unsafe { _mm512_cmp_pd_mask::<_CMP_LE_OQ>(self.0, t.0) }
    }
    #[inline(always)]
    fn ne(self, t: Self) -> __mmask8 {
        unsafe { _mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(self.0, t.0) }
    }
    #[inline(always)]
    fn select(self, mask: __mmask8) -> Self {
        unsafe { Avx512(_mm512_maskz_mov_pd(mask, self.0)) }
    }
    #[inline(always)]
    fn add_in(self, o: Self, mask: __mmask8) -> Self {
        // One instruction: a masked add, where select and add would be two.
        unsafe { Avx512(_mm512_mask_add_pd(self.0, mask, self.0, o.0)) }
    }
    #[inline(always)]
    fn first(n: usize) -> __mmask8 {
        (0xffu32 >> (8 - n.min(8))) as __mmask8
    }
    #[inline(always)]
    fn both(a: __mmask8, b: __mmask8) -> __mmask8 {
        a & b
    }
    #[inline(always)]
    fn bits(mask: __mmask8) -> u32 {
        u32::from(mask)
    }
    #[inline(always)]
    fn pack(self, bits: u32) -> Self {
        unsafe { Avx512(_mm512_maskz_compress_pd(bits as __mmask8, self.0)) }
    }
    #[inline(always)]
    fn sum(self) -> f64 {
        unsafe { _mm512_reduce_add_pd(self.0) }
    }
}
