//! Where a party's noise comes from.
use std::sync::Mutex;

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use crate::error::PartyError;

/// Where the noise comes from: ChaCha20 seeded from the operating system, never from a
/// caller. Only test builds (and the `seeded-noise` feature, which in-process statistical
/// tests of the sampler enable and a served party never has) may seed it instead, so those
/// tests are reproducible.
#[allow(clippy::large_enum_variant)] // one per node: its size does not matter
pub(crate) enum NoiseSource {
    Os(Mutex<ChaCha20Rng>),
    /// Each release's noise from its own stream, keyed by (seed, chain, step): the same for
    /// every schedule of concurrent chains. Predictable by design: tests only.
    #[cfg(any(test, feature = "seeded-noise"))]
    Keyed(u64),
}

impl NoiseSource {
    pub(crate) fn from_os() -> Result<Self, PartyError> {
        let rng = ChaCha20Rng::try_from_rng(&mut rand::rngs::SysRng).map_err(|e| {
            PartyError::FailedPrecondition(format!("the OS random source failed: {e}"))
        })?;
        Ok(NoiseSource::Os(Mutex::new(rng)))
    }

    #[cfg(any(test, feature = "seeded-noise"))]
    pub(crate) fn seeded(seed: u64) -> Self {
        NoiseSource::Keyed(seed)
    }

    /// The generator for the release of `chain`'s `step`: for OS noise a fresh ChaCha20
    /// seeded from the node's, so releases draw their batches and noise without holding a
    /// lock while they read rows.
    #[cfg_attr(
        not(any(test, feature = "seeded-noise")),
        allow(unused_variables) // the key selects a stream only for seeded noise
    )]
    pub(crate) fn fork(&self, chain: u32, step: u64) -> ChaCha20Rng {
        match self {
            NoiseSource::Os(rng) => {
                ChaCha20Rng::from_rng(&mut *rng.lock().expect("noise source lock"))
            }
            #[cfg(any(test, feature = "seeded-noise"))]
            NoiseSource::Keyed(seed) => {
                let mut rng = ChaCha20Rng::seed_from_u64(*seed);
                rng.set_stream(u64::from(chain));
                rng.set_word_pos(u128::from(step) << 32);
                rng
            }
        }
    }
}
