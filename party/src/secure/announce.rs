//! A party's announcement of its session key, signed with its TLS key. The coordinator
//! relays the announcements; were they unsigned, it could hand each party a key of its own
//! in place of a peer's, agree every "pairwise" seed itself and unmask everyone (the
//! active-adversary setting of Bonawitz et al. 2017, which signs the key advertisements).
//! Binding the key to the party's certificate from the federation's CA rules that out.
use rustls::SignatureScheme;
use rustls::crypto::ring::sign::any_supported_type;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{
    CertificateDer, DnsName, PrivateKeyDer, ServerName, SignatureVerificationAlgorithm, UnixTime,
};

use super::SecureError;

/// What every announcement of a session must agree on: the session id the coordinator
/// picked (fresh per run, so no seed or mask repeats across runs), the parties, and the
/// number of colluding parties the noise shares assume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terms {
    pub session: [u8; 32],
    /// Every party's name, sorted and deduplicated.
    pub roster: Vec<String>,
    pub threshold: u32,
}

impl Terms {
    /// Sorts and deduplicates the roster; refuses fewer than two parties, a name that is
    /// not a DNS name (parties are named by their certificates), and a threshold that
    /// leaves no honest party.
    pub fn new(
        session: [u8; 32],
        mut roster: Vec<String>,
        threshold: u32,
    ) -> Result<Self, SecureError> {
        roster.sort();
        roster.dedup();
        if roster.len() < 2 {
            return Err(SecureError::RosterTooSmall(roster.len()));
        }
        if let Some(bad) = roster
            .iter()
            .find(|n| DnsName::try_from(n.as_str()).is_err())
        {
            return Err(SecureError::BadName(bad.clone()));
        }
        if threshold as usize >= roster.len() {
            return Err(SecureError::BadThreshold {
                threshold,
                parties: roster.len(),
            });
        }
        Ok(Self {
            session,
            roster,
            threshold,
        })
    }
}

/// One party's signed session key.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Announcement {
    pub session: [u8; 32],
    pub roster: Vec<String>,
    pub threshold: u32,
    pub party: String,
    /// The X25519 public key.
    pub key: [u8; 32],
    /// The party's noise multiplier: signed so that peers can check the noise shares.
    pub multiplier: f64,
    /// A DP HMC run's gradient noise multiplier, likewise; 0 for a run with one noise.
    #[serde(default)]
    pub gradient_multiplier: f64,
    /// DER certificates, the party's own first, then any intermediates.
    pub cert_chain: Vec<Vec<u8>>,
    /// The TLS key's signature over [`Announcement::signed_bytes`].
    pub signature: Vec<u8>,
}

/// Separates these signatures from any other use of the TLS key.
const DOMAIN: &[u8] = b"fedmcmc secure aggregation v1\0";

/// The schemes a node's TLS key may sign with, and the algorithm that verifies each. The
/// key's type fixes which one applies, so trying each when verifying cannot confuse them.
static SCHEMES: [(SignatureScheme, &dyn SignatureVerificationAlgorithm); 3] = [
    (
        SignatureScheme::ECDSA_NISTP256_SHA256,
        webpki::ring::ECDSA_P256_SHA256,
    ),
    (
        SignatureScheme::ECDSA_NISTP384_SHA384,
        webpki::ring::ECDSA_P384_SHA384,
    ),
    (SignatureScheme::ED25519, webpki::ring::ED25519),
];

/// The DER certificates in a PEM text (a chain file or the CA file).
pub fn read_pem_certs(
    what: &'static str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, SecureError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SecureError::Pem {
            what,
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(SecureError::Pem {
            what,
            reason: "it holds no certificate".into(),
        });
    }
    Ok(certs)
}

impl Announcement {
    /// Signs `party`'s `key` and its multipliers (the release's, and a DP HMC run's
    /// gradient's or 0) under `terms` with the node's TLS private key (`key_pem`), attaching
    /// its certificate chain (`cert_chain_pem`, leaf first).
    pub fn sign(
        terms: &Terms,
        party: &str,
        key: [u8; 32],
        (multiplier, gradient_multiplier): (f64, f64),
        cert_chain_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<Self, SecureError> {
        let cert_chain = read_pem_certs("the certificate chain", cert_chain_pem)?
            .into_iter()
            .map(|c| c.to_vec())
            .collect();
        let private = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| SecureError::Pem {
            what: "the TLS private key",
            reason: e.to_string(),
        })?;
        let unsupported = || SecureError::UnsupportedKey {
            party: party.to_owned(),
        };
        let signer = any_supported_type(&private)
            .map_err(|_| unsupported())?
            .choose_scheme(&SCHEMES.map(|(scheme, _)| scheme))
            .ok_or_else(unsupported)?;
        let mut announcement = Self {
            session: terms.session,
            roster: terms.roster.clone(),
            threshold: terms.threshold,
            party: party.to_owned(),
            key,
            multiplier,
            gradient_multiplier,
            cert_chain,
            signature: Vec::new(),
        };
        announcement.signature =
            signer
                .sign(&announcement.signed_bytes())
                .map_err(|e| SecureError::Signing {
                    party: party.to_owned(),
                    reason: e.to_string(),
                })?;
        Ok(announcement)
    }

    /// The canonical encoding of everything but the certificates and the signature: a
    /// domain prefix, then each field in order, fixed-size ones as they are, strings and
    /// the roster length-prefixed (u32, big-endian), the multiplier as its IEEE bits. No two
    /// announcements encode alike.
    pub fn signed_bytes(&self) -> Vec<u8> {
        fn string(out: &mut Vec<u8>, s: &str) {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        let mut out = DOMAIN.to_vec();
        out.extend_from_slice(&self.session);
        out.extend_from_slice(&(self.roster.len() as u32).to_be_bytes());
        for name in &self.roster {
            string(&mut out, name);
        }
        out.extend_from_slice(&self.threshold.to_be_bytes());
        string(&mut out, &self.party);
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.multiplier.to_bits().to_be_bytes());
        out.extend_from_slice(&self.gradient_multiplier.to_bits().to_be_bytes());
        out
    }

    /// Checks that the announcement is under `expected`'s terms, is well formed, and is
    /// signed by a certificate from one of `ca_roots` issued to the party it names (valid
    /// now, for TLS client use, as every node certificate is).
    pub fn verify(
        &self,
        ca_roots: &[CertificateDer<'_>],
        expected: &Terms,
    ) -> Result<(), SecureError> {
        let party = || self.party.clone();
        if self.session != expected.session {
            return Err(SecureError::WrongSession(party()));
        }
        if self.roster != expected.roster {
            return Err(SecureError::WrongRoster(party()));
        }
        if self.threshold != expected.threshold {
            return Err(SecureError::WrongThreshold(party()));
        }
        if !expected.roster.contains(&self.party) {
            return Err(SecureError::NotInRoster(party()));
        }
        if !(self.multiplier.is_finite() && self.multiplier > 0.0) {
            return Err(SecureError::BadMultiplier {
                party: party(),
                multiplier: self.multiplier.to_string(),
            });
        }
        if !(self.gradient_multiplier.is_finite() && self.gradient_multiplier >= 0.0) {
            return Err(SecureError::BadMultiplier {
                party: party(),
                multiplier: self.gradient_multiplier.to_string(),
            });
        }
        if self.key == [0; 32] {
            return Err(SecureError::ZeroKey(party()));
        }
        let untrusted = |reason: String| SecureError::Untrusted {
            party: party(),
            reason,
        };
        let chain: Vec<CertificateDer<'_>> = self
            .cert_chain
            .iter()
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        let (leaf, intermediates) = chain
            .split_first()
            .ok_or_else(|| untrusted("it has no certificate".into()))?;
        let anchors = ca_roots
            .iter()
            .map(webpki::anchor_from_trusted_cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| untrusted(format!("a CA certificate does not parse ({e})")))?;
        let cert = webpki::EndEntityCert::try_from(leaf)
            .map_err(|e| untrusted(format!("its certificate does not parse ({e})")))?;
        cert.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            intermediates,
            UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(|e| untrusted(format!("{e}")))?;
        let name =
            ServerName::try_from(self.party.as_str()).map_err(|_| SecureError::BadName(party()))?;
        cert.verify_is_valid_for_subject_name(&name)
            .map_err(|_| SecureError::NameMismatch { claimed: party() })?;
        let message = self.signed_bytes();
        if SCHEMES.iter().any(|(_, alg)| {
            cert.verify_signature(*alg, &message, &self.signature)
                .is_ok()
        }) {
            Ok(())
        } else {
            Err(SecureError::BadSignature(party()))
        }
    }
}

/// A session's announcements, one per party of the roster, each verified: what
/// [`super::PairwiseMasks::derive`] takes, so that no unverified key reaches it.
#[derive(Clone, Debug)]
pub struct VerifiedRoster {
    terms: Terms,
    /// In roster order.
    announcements: Vec<Announcement>,
}

impl VerifiedRoster {
    /// Verifies each announcement (see [`Announcement::verify`]) and that there is exactly
    /// one for each party of the roster.
    pub fn verify(
        announcements: Vec<Announcement>,
        ca_roots: &[CertificateDer<'_>],
        terms: &Terms,
    ) -> Result<Self, SecureError> {
        let mut slots: Vec<Option<Announcement>> = vec![None; terms.roster.len()];
        for a in announcements {
            a.verify(ca_roots, terms)?;
            let i = terms
                .roster
                .binary_search(&a.party)
                .map_err(|_| SecureError::NotInRoster(a.party.clone()))?;
            if slots[i].is_some() {
                return Err(SecureError::Duplicate(a.party));
            }
            slots[i] = Some(a);
        }
        let announcements = slots
            .into_iter()
            .zip(&terms.roster)
            .map(|(a, name)| a.ok_or_else(|| SecureError::Missing(name.clone())))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            terms: terms.clone(),
            announcements,
        })
    }

    pub fn terms(&self) -> &Terms {
        &self.terms
    }

    /// The verified announcements, in roster order (for the parties' multipliers).
    pub fn announcements(&self) -> &[Announcement] {
        &self.announcements
    }
}
