//! Pairwise masks (Bonawitz et al., CCS 2017, Sec. 4, "masking with one-time pads"): each
//! pair of parties u < v (by name) agrees a seed s_uv; u adds PRG(s_uv) to its contribution
//! and v subtracts it. In Z_2^128 the masks cancel exactly in the sum of all contributions,
//! while each party's masked contribution alone is uniform to anyone missing one of its
//! seeds: the coordinator, or any coalition that leaves out one of its peers.
use hkdf::Hkdf;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use sha2::Sha256;
use zeroize::Zeroizing;

use super::{KeyPair, SecureError, VerifiedRoster};

/// Whether a party adds or subtracts a pair's mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sign {
    Add,
    Subtract,
}

struct Peer {
    name: String,
    /// The pair's seed; wiped on drop.
    seed: Zeroizing<[u8; 32]>,
    sign: Sign,
}

/// One party's pair seeds with every other party of a session, from which it draws the
/// mask of each (chain, step).
pub struct PairwiseMasks {
    own: String,
    peers: Vec<Peer>,
}

impl PairwiseMasks {
    /// Derives a seed for each peer of `roster`: HKDF-SHA256 with the X25519 shared secret
    /// as input key material, the session id as salt (a fresh session gives fresh seeds even
    /// were a key reused) and the pair's names, lower first, separated by a NUL, as info
    /// (both ends derive the same seed). `own` must be `own_party`'s key as announced.
    pub fn derive(
        own: &KeyPair,
        own_party: &str,
        roster: &VerifiedRoster,
    ) -> Result<Self, SecureError> {
        let session = roster.terms().session;
        let announced = roster
            .announcements()
            .iter()
            .find(|a| a.party == own_party)
            .ok_or_else(|| SecureError::NotInRoster(own_party.to_owned()))?;
        if announced.key != own.public() {
            return Err(SecureError::NotOwnKey(own_party.to_owned()));
        }
        let mut peers = Vec::with_capacity(roster.announcements().len() - 1);
        for a in roster
            .announcements()
            .iter()
            .filter(|a| a.party != own_party)
        {
            let shared = own.agree(&a.party, a.key)?;
            let (low, high, sign) = if own_party < a.party.as_str() {
                (own_party, a.party.as_str(), Sign::Add)
            } else {
                (a.party.as_str(), own_party, Sign::Subtract)
            };
            let info = [low.as_bytes(), b"\0", high.as_bytes()].concat();
            let mut seed = Zeroizing::new([0u8; 32]);
            Hkdf::<Sha256>::new(Some(&session), shared.as_bytes())
                .expand(&info, &mut *seed)
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            peers.push(Peer {
                name: a.party.clone(),
                seed,
                sign,
            });
        }
        Ok(Self {
            own: own_party.to_owned(),
            peers,
        })
    }

    /// The party these masks are for.
    pub fn own(&self) -> &str {
        &self.own
    }

    /// The peers, in roster order.
    pub fn peers(&self) -> impl Iterator<Item = &str> {
        self.peers.iter().map(|p| p.name.as_str())
    }

    /// This party's total mask for the `entry_count` entries released at `chain`'s `step`:
    /// the sum over peers of ± that pair's stream. Each pair's stream is ChaCha20 keyed by
    /// HKDF-expand(seed, "mask" ‖ chain ‖ step), one u128 per entry. The session (hence the
    /// run) is in the seed, so no (session, chain, step, entry) and thus no mask is ever
    /// used twice within or across runs, provided the caller masks each (chain, step) once;
    /// a retried step gets the same mask, hence the same masked answer, as it must.
    pub fn mask(&self, chain: u32, step: u64, entry_count: usize) -> Vec<u128> {
        let mut total = vec![0u128; entry_count];
        let info = [
            b"mask\0".as_slice(),
            &chain.to_be_bytes(),
            &step.to_be_bytes(),
        ]
        .concat();
        let mut bytes = vec![0u8; 16 * entry_count];
        for peer in &self.peers {
            let mut key = Zeroizing::new([0u8; 32]);
            Hkdf::<Sha256>::from_prk(&*peer.seed)
                .expect("a 32-byte seed is a valid HKDF-SHA256 key")
                .expand(&info, &mut *key)
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            ChaCha20Rng::from_seed(*key).fill_bytes(&mut bytes);
            for (t, chunk) in total.iter_mut().zip(bytes.chunks_exact(16)) {
                let m = u128::from_le_bytes(chunk.try_into().expect("16-byte chunk"));
                *t = match peer.sign {
                    Sign::Add => t.wrapping_add(m),
                    Sign::Subtract => t.wrapping_sub(m),
                };
            }
        }
        total
    }
}

impl std::fmt::Debug for PairwiseMasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairwiseMasks")
            .field("own", &self.own)
            .field("peers", &self.peers().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secure::{apply, encode};

    /// Party "b" of a, b, c with fixed seeds: deterministic.
    fn fixed() -> PairwiseMasks {
        let peer = |name: &str, byte: u8, sign| Peer {
            name: name.into(),
            seed: Zeroizing::new([byte; 32]),
            sign,
        };
        PairwiseMasks {
            own: "b".into(),
            peers: vec![peer("a", 1, Sign::Subtract), peer("c", 2, Sign::Add)],
        }
    }

    #[test]
    fn masked_values_look_uniform_and_change_every_step() {
        const STEPS: u64 = 20_000;
        let masks = fixed();
        for value in [0i128, 12345] {
            let mut top = [0u64; 4];
            let mut previous = None;
            for step in 0..STEPS {
                let mut masked = [encode(value)];
                apply(&mut masked, &masks.mask(3, step, 1));
                for (bit, count) in top.iter_mut().enumerate() {
                    *count += ((masked[0] >> (127 - bit)) & 1) as u64;
                }
                assert_ne!(Some(masked[0]), previous, "step {step}");
                previous = Some(masked[0]);
            }
            let se = (0.25 / STEPS as f64).sqrt();
            for (bit, count) in top.iter().enumerate() {
                let freq = *count as f64 / STEPS as f64;
                assert!(
                    (freq - 0.5).abs() < 4.0 * se,
                    "value {value}: bit {} set with frequency {freq}",
                    127 - bit
                );
            }
        }
    }

    #[test]
    fn masks_depend_on_chain_and_step_and_reproduce() {
        let masks = fixed();
        let m = masks.mask(0, 0, 8);
        assert_eq!(m, masks.mask(0, 0, 8));
        assert_eq!(m[..3], masks.mask(0, 0, 3)[..]);
        for (chain, step) in [(0, 1), (1, 0), (1, 1), (0, 1 << 32)] {
            let other = masks.mask(chain, step, 8);
            assert!(
                m.iter().zip(&other).all(|(a, b)| a != b),
                "(chain {chain}, step {step})"
            );
        }
        // Entries within one mask differ too.
        let mut sorted = m.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), m.len());
    }

    #[test]
    fn the_two_ends_of_a_pair_mask_oppositely() {
        let low = PairwiseMasks {
            own: "a".into(),
            peers: vec![Peer {
                name: "b".into(),
                seed: Zeroizing::new([9; 32]),
                sign: Sign::Add,
            }],
        };
        let high = PairwiseMasks {
            own: "b".into(),
            peers: vec![Peer {
                name: "a".into(),
                seed: Zeroizing::new([9; 32]),
                sign: Sign::Subtract,
            }],
        };
        let (a, b) = (low.mask(2, 7, 5), high.mask(2, 7, 5));
        assert!(
            a.iter()
                .zip(&b)
                .all(|(x, y)| x.wrapping_add(*y) == 0 && *x != 0)
        );
    }
}
