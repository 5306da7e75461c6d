//! Chain splitting and rank normalisation (Vehtari et al. 2021, Sec. 3 and 4.1).

use statrs::distribution::{ContinuousCDF, Normal};

/// Draws of `chains` with each chain cut into its first and last `half` draws, stored as
/// `2 · n_chains` consecutive rows of length `half`. Splitting lets R̂ and ESS see a trend
/// within a chain. For an odd length the middle draw is dropped, as in ArviZ.
pub(super) struct Split {
    pub data: Vec<f64>,
    pub half: usize,
}

impl Split {
    pub fn new<C: AsRef<[f64]>>(chains: &[C], n_draws: usize) -> Self {
        let half = n_draws / 2;
        let mut data = Vec::with_capacity(2 * half * chains.len());
        for chain in chains {
            let chain = chain.as_ref();
            data.extend_from_slice(&chain[..half]);
            data.extend_from_slice(&chain[n_draws - half..]);
        }
        Split { data, half }
    }

    /// The same layout with `f` applied to every draw.
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Self {
        Split {
            data: self.data.iter().map(|&x| f(x)).collect(),
            half: self.half,
        }
    }

    /// The pooled draws replaced by their normal scores: fractional ranks r (ties averaged)
    /// mapped through Φ⁻¹((r − 3/8)/(S + 1/4)) (Blom's offset). Makes the diagnostics
    /// well-defined for heavy tails and invariant to monotone transforms.
    pub fn rank_normalised(&self) -> Self {
        let s = self.data.len();
        let mut order: Vec<usize> = (0..s).collect();
        order.sort_unstable_by(|&i, &j| self.data[i].total_cmp(&self.data[j]));
        let normal = Normal::standard();
        let mut z = vec![0.0; s];
        let mut start = 0;
        while start < s {
            let value = self.data[order[start]];
            let end = start
                + order[start..]
                    .iter()
                    .take_while(|&&i| self.data[i] == value)
                    .count();
            // 1-based ranks start+1 ..= end share their average.
            let rank = (start + 1 + end) as f64 / 2.0;
            let score = normal.inverse_cdf((rank - 0.375) / (s as f64 + 0.25));
            for &i in &order[start..end] {
                z[i] = score;
            }
            start = end;
        }
        Split {
            data: z,
            half: self.half,
        }
    }

    pub fn chains(&self) -> std::slice::ChunksExact<'_, f64> {
        self.data.chunks_exact(self.half)
    }

    pub fn n_chains(&self) -> usize {
        self.data.len() / self.half
    }
}
