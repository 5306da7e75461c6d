//! A party's ephemeral X25519 key pair, one per session: a key that leaks after the session
//! reveals nothing about another session's masks.
use x25519_dalek::{PublicKey, SharedSecret, StaticSecret};
use zeroize::Zeroizing;

use super::SecureError;

/// An X25519 key pair. The secret is wiped when the pair is dropped (`x25519-dalek` with
/// `zeroize`), and never printed.
pub struct KeyPair {
    secret: StaticSecret,
    public: [u8; 32],
}

impl KeyPair {
    /// Draws a key pair from the operating system's random source. `StaticSecret` rather
    /// than `EphemeralSecret` because one secret agrees a seed with every peer.
    pub fn generate() -> Result<Self, SecureError> {
        let mut bytes = Zeroizing::new([0u8; 32]);
        rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut *bytes)
            .map_err(|e| SecureError::Random(e.to_string()))?;
        Ok(Self::from_secret(StaticSecret::from(*bytes)))
    }

    /// A key pair from its secret: one the party's ledger kept for an open run, so that
    /// after a restart the run's masks can be derived again.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self::from_secret(StaticSecret::from(bytes))
    }

    /// The secret, for the party's ledger (never the wire).
    pub fn secret_bytes(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.secret.to_bytes())
    }

    fn from_secret(secret: StaticSecret) -> Self {
        let public = PublicKey::from(&secret).to_bytes();
        Self { secret, public }
    }

    /// The public key, to announce.
    pub fn public(&self) -> [u8; 32] {
        self.public
    }

    /// The X25519 shared secret with `peer`'s public key; refused for a low-order point,
    /// which would give an all-zero secret the coordinator also knows.
    pub(crate) fn agree(&self, peer: &str, key: [u8; 32]) -> Result<SharedSecret, SecureError> {
        let shared = self.secret.diffie_hellman(&PublicKey::from(key));
        if shared.was_contributory() {
            Ok(shared)
        } else {
            Err(SecureError::LowOrderKey(peer.to_owned()))
        }
    }
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_is_symmetric_and_fresh_pairs_differ() {
        let a = KeyPair::generate().unwrap();
        let b = KeyPair::generate().unwrap();
        assert_ne!(a.public(), b.public());
        let ab = a.agree("b", b.public()).unwrap();
        let ba = b.agree("a", a.public()).unwrap();
        assert_eq!(ab.as_bytes(), ba.as_bytes());
    }

    #[test]
    fn low_order_keys_are_refused() {
        let a = KeyPair::from_bytes([7; 32]);
        // The identity and a point of order 8 on Curve25519: both give an all-zero secret.
        let mut order8 = [0u8; 32];
        order8[..8].copy_from_slice(&[0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae]);
        order8[8..16].copy_from_slice(&[0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4, 0x6a]);
        order8[16..24].copy_from_slice(&[0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd]);
        order8[24..].copy_from_slice(&[0x86, 0x62, 0x05, 0x16, 0x5f, 0x49, 0xb8, 0x00]);
        for key in [[0u8; 32], order8] {
            assert_eq!(
                a.agree("b", key).err(),
                Some(SecureError::LowOrderKey("b".into()))
            );
        }
    }
}
