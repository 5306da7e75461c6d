//! Secure aggregation's cryptography end to end, with certificates from `tls::issue`:
//! announcements verify only when signed by the named party's certificate from the
//! federation's CA under the session's terms, and the parties' masked contributions sum to
//! the exact integer sum.
use std::path::Path;

use fedmcmc_party::secure::{
    Announcement, KeyPair, PairwiseMasks, SecureError, Terms, VerifiedRoster, apply, decode_sum,
    encode, read_pem_certs,
};
use fedmcmc_party::tls;
use rustls_pki_types::CertificateDer;

const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

/// A federation of `n` parties with a CA in a temporary directory, one session's terms, each
/// party's key pair and signed announcement.
struct Federation {
    dir: tempfile::TempDir,
    ca: Vec<CertificateDer<'static>>,
    terms: Terms,
    keys: Vec<KeyPair>,
    announcements: Vec<Announcement>,
}

fn sign_as(dir: &Path, cert_of: &str, terms: &Terms, party: &str, key: [u8; 32]) -> Announcement {
    Announcement::sign(
        terms,
        party,
        key,
        (1.25, 0.0),
        &std::fs::read(tls::node_cert(dir, cert_of)).unwrap(),
        &std::fs::read(tls::node_key(dir, cert_of)).unwrap(),
    )
    .unwrap()
}

fn ca_of(dir: &Path) -> Vec<CertificateDer<'static>> {
    read_pem_certs(
        "the CA certificate",
        &std::fs::read(tls::ca_cert(dir)).unwrap(),
    )
    .unwrap()
}

impl Federation {
    fn new(n: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = NAMES[..n].iter().map(|s| s.to_string()).collect();
        tls::issue(dir.path(), &names).unwrap();
        // Given in another order, with a repeat: the terms sort and deduplicate.
        let mut given = names.clone();
        given.reverse();
        given.push(names[0].clone());
        let terms = Terms::new([7; 32], given, 1).unwrap();
        assert_eq!(terms.roster, names);
        let keys: Vec<KeyPair> = (0..n).map(|_| KeyPair::generate().unwrap()).collect();
        let announcements = names
            .iter()
            .zip(&keys)
            .map(|(name, k)| sign_as(dir.path(), name, &terms, name, k.public()))
            .collect();
        Self {
            ca: ca_of(dir.path()),
            dir,
            terms,
            keys,
            announcements,
        }
    }

    fn verified(&self) -> Result<VerifiedRoster, SecureError> {
        VerifiedRoster::verify(self.announcements.clone(), &self.ca, &self.terms)
    }

    fn masks(&self) -> Vec<PairwiseMasks> {
        let roster = self.verified().unwrap();
        self.terms
            .roster
            .iter()
            .zip(&self.keys)
            .map(|(name, k)| PairwiseMasks::derive(k, name, &roster).unwrap())
            .collect()
    }

    /// The announcement of `party` (by index) refused with `error`, alone and in the roster.
    fn refuses(&self, index: usize, announcement: Announcement, error: SecureError) {
        assert_eq!(
            announcement.verify(&self.ca, &self.terms),
            Err(error.clone())
        );
        let mut all = self.announcements.clone();
        all[index] = announcement;
        assert_eq!(
            VerifiedRoster::verify(all, &self.ca, &self.terms).err(),
            Some(error)
        );
    }
}

#[test]
fn masked_contributions_decode_to_the_exact_sum() {
    for n in [3, 5] {
        let fed = Federation::new(n);
        for a in &fed.announcements {
            a.verify(&fed.ca, &fed.terms).unwrap();
        }
        let masks = fed.masks();
        for (chain, step) in [(0, 0), (0, 1), (3, 17), (1, u64::MAX)] {
            for entries in [1, 4, 33] {
                let all: Vec<Vec<u128>> =
                    masks.iter().map(|m| m.mask(chain, step, entries)).collect();
                assert!(all.iter().all(|m| m.iter().all(|x| *x != 0)));
                assert_eq!(decode_sum(&all).unwrap(), vec![0; entries], "masks cancel");

                let near = 1i128 << 100;
                let values: Vec<Vec<i128>> = (0..n)
                    .map(|p| {
                        (0..entries)
                            .map(|e| {
                                let x = (p * 31 + e * 7) as i128;
                                match (p + e) % 4 {
                                    0 => near - x,
                                    1 => -near + x,
                                    2 => -x - 1,
                                    _ => x * 12345,
                                }
                            })
                            .collect()
                    })
                    .collect();
                let contributions: Vec<Vec<u128>> = values
                    .iter()
                    .zip(&all)
                    .map(|(v, m)| {
                        let mut c: Vec<u128> = v.iter().map(|x| encode(*x)).collect();
                        apply(&mut c, m);
                        assert!(c.iter().zip(v).all(|(c, v)| *c != encode(*v)));
                        c
                    })
                    .collect();
                let expected: Vec<i128> = (0..entries)
                    .map(|e| values.iter().map(|v| v[e]).sum())
                    .collect();
                assert_eq!(decode_sum(&contributions).unwrap(), expected);
            }
        }
    }
}

#[test]
fn a_retried_step_gets_the_same_mask_and_another_step_another() {
    let fed = Federation::new(3);
    let masks = fed.masks();
    let again = fed.masks();
    for (m, r) in masks.iter().zip(&again) {
        assert_eq!(m.mask(2, 9, 6), r.mask(2, 9, 6));
        for other in [m.mask(2, 10, 6), m.mask(3, 9, 6)] {
            assert!(m.mask(2, 9, 6).iter().zip(&other).all(|(x, y)| x != y));
        }
    }
    // A new session with the same keys gives new seeds, hence new masks.
    let mut terms = fed.terms.clone();
    terms.session = [8; 32];
    let announcements = fed
        .terms
        .roster
        .iter()
        .zip(&fed.keys)
        .map(|(name, k)| sign_as(fed.dir.path(), name, &terms, name, k.public()))
        .collect();
    let roster = VerifiedRoster::verify(announcements, &fed.ca, &terms).unwrap();
    let other = PairwiseMasks::derive(&fed.keys[0], "a", &roster).unwrap();
    assert!(
        other
            .mask(2, 9, 6)
            .iter()
            .zip(&masks[0].mask(2, 9, 6))
            .all(|(x, y)| x != y)
    );
}

#[test]
fn a_substituted_key_is_detected() {
    let fed = Federation::new(3);
    let coordinator = KeyPair::generate().unwrap();
    let mut forged = fed.announcements[1].clone();
    forged.key = coordinator.public();
    let error = SecureError::BadSignature("b".into());
    assert_eq!(
        error.to_string(),
        "the key announced for party b is not signed by b's certificate: a coordinator may have substituted it"
    );
    fed.refuses(1, forged, error.clone());
    // Nor may the signed multiplier change.
    let mut forged = fed.announcements[1].clone();
    forged.multiplier = 0.5;
    fed.refuses(1, forged, error);
}

#[test]
fn the_coordinators_certificate_cannot_speak_for_a_party() {
    let fed = Federation::new(3);
    tls::issue(fed.dir.path(), &["coordinator".to_string()]).unwrap();
    let coordinator = KeyPair::generate().unwrap();
    let forged = sign_as(
        fed.dir.path(),
        "coordinator",
        &fed.terms,
        "b",
        coordinator.public(),
    );
    fed.refuses(
        1,
        forged,
        SecureError::NameMismatch {
            claimed: "b".into(),
        },
    );
    // Nor another party's certificate.
    let forged = sign_as(fed.dir.path(), "c", &fed.terms, "b", coordinator.public());
    fed.refuses(
        1,
        forged,
        SecureError::NameMismatch {
            claimed: "b".into(),
        },
    );
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let fed = Federation::new(3);
    let other = tempfile::tempdir().unwrap();
    tls::issue(other.path(), &["b".to_string()]).unwrap();
    let forged = sign_as(other.path(), "b", &fed.terms, "b", fed.keys[1].public());
    // Every CA `issue` makes has the same subject: webpki finds the federation's CA as the
    // issuer by name, and its key does not verify the certificate.
    assert_eq!(
        forged.verify(&fed.ca, &fed.terms).err(),
        Some(SecureError::Untrusted {
            party: "b".into(),
            reason: "InvalidSignatureForPublicKey".into()
        })
    );
    // It does verify against its own CA: only the issuer is wrong.
    forged.verify(&ca_of(other.path()), &fed.terms).unwrap();
    // No certificate at all.
    let mut bare = fed.announcements[1].clone();
    bare.cert_chain.clear();
    assert!(matches!(
        bare.verify(&fed.ca, &fed.terms),
        Err(SecureError::Untrusted { .. })
    ));
}

#[test]
fn another_sessions_terms_are_refused() {
    let fed = Federation::new(3);
    let b = &fed.announcements[1];
    let expect = |session, roster: &[&str], threshold| {
        let roster = roster.iter().map(|s| s.to_string()).collect();
        b.verify(&fed.ca, &Terms::new(session, roster, threshold).unwrap())
            .err()
    };
    let error = |e: fn(String) -> SecureError| Some(e("b".into()));
    assert_eq!(expect([7; 32], &["a", "b", "c"], 1), None);
    assert_eq!(
        expect([6; 32], &["a", "b", "c"], 1),
        error(SecureError::WrongSession)
    );
    assert_eq!(
        expect([7; 32], &["a", "b", "c", "d"], 1),
        error(SecureError::WrongRoster)
    );
    assert_eq!(
        expect([7; 32], &["a", "b"], 1),
        error(SecureError::WrongRoster)
    );
    assert_eq!(
        expect([7; 32], &["a", "b", "c"], 2),
        error(SecureError::WrongThreshold)
    );
    // An announcement relabelled with this session's terms loses its signature.
    let mut relabelled = sign_as(
        fed.dir.path(),
        "b",
        &Terms::new([6; 32], fed.terms.roster.clone(), 1).unwrap(),
        "b",
        fed.keys[1].public(),
    );
    relabelled.session = fed.terms.session;
    fed.refuses(1, relabelled, SecureError::BadSignature("b".into()));
}

#[test]
fn malformed_announcements_and_rosters_are_refused() {
    let fed = Federation::new(3);
    let dir = fed.dir.path();
    for multiplier in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let mut a = fed.announcements[1].clone();
        a.multiplier = multiplier;
        assert!(matches!(
            a.verify(&fed.ca, &fed.terms),
            Err(SecureError::BadMultiplier { .. })
        ));
    }
    fed.refuses(
        1,
        sign_as(dir, "b", &fed.terms, "b", [0; 32]),
        SecureError::ZeroKey("b".into()),
    );
    tls::issue(dir, &["z".to_string()]).unwrap();
    let outsider = sign_as(dir, "z", &fed.terms, "z", fed.keys[1].public());
    fed.refuses(1, outsider, SecureError::NotInRoster("z".into()));

    let mut twice = fed.announcements.clone();
    twice[2] = twice[1].clone();
    assert_eq!(
        VerifiedRoster::verify(twice.clone(), &fed.ca, &fed.terms).err(),
        Some(SecureError::Duplicate("b".into()))
    );
    twice.pop();
    assert_eq!(
        VerifiedRoster::verify(twice, &fed.ca, &fed.terms).err(),
        Some(SecureError::Missing("c".into()))
    );

    // A party's own announcement must carry its own key.
    let roster = fed.verified().unwrap();
    assert_eq!(
        PairwiseMasks::derive(&fed.keys[1], "a", &roster).err(),
        Some(SecureError::NotOwnKey("a".into()))
    );
}

#[test]
fn a_low_order_key_signed_by_its_party_gives_no_seed() {
    let fed = Federation::new(3);
    // A point of order 8 on Curve25519: X25519 with it gives the all-zero secret.
    let order8: [u8; 32] = [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ];
    let mut all = fed.announcements.clone();
    all[1] = sign_as(fed.dir.path(), "b", &fed.terms, "b", order8);
    let roster = VerifiedRoster::verify(all, &fed.ca, &fed.terms).unwrap();
    assert_eq!(
        PairwiseMasks::derive(&fed.keys[0], "a", &roster).err(),
        Some(SecureError::LowOrderKey("b".into()))
    );
}

#[test]
fn terms_need_two_parties_dns_names_and_an_honest_party() {
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        Terms::new([0; 32], names(&["a", "a"]), 0).err(),
        Some(SecureError::RosterTooSmall(1))
    );
    assert_eq!(
        Terms::new([0; 32], names(&["a", "not a name"]), 0).err(),
        Some(SecureError::BadName("not a name".into()))
    );
    assert_eq!(
        Terms::new([0; 32], names(&["a", "b"]), 2).err(),
        Some(SecureError::BadThreshold {
            threshold: 2,
            parties: 2
        })
    );
    assert!(Terms::new([0; 32], names(&["a", "b"]), 1).is_ok());
}
