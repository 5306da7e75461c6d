//! Secure aggregation: the coordinator learns only the sum of the parties' integer
//! contributions, so that the parties can share the noise (each adds a part of it) instead
//! of each adding all of it (Kairouz, Liu & Steinke, ICML 2021, "The Distributed Discrete
//! Gaussian Mechanism for Federated Learning with Secure Aggregation").
//!
//! The masking is that of Bonawitz et al. (CCS 2017, "Practical Secure Aggregation for
//! Privacy-Preserving Machine Learning"), without its dropout recovery: a run needs every
//! party of its roster.
//!
//! 1. [`keys`]: each party draws an ephemeral X25519 key pair per session.
//! 2. [`announce`]: it announces the public key, signed with its TLS key, under the
//!    session's [`Terms`]; every party verifies every announcement against the federation's
//!    CA, so a coordinator that relays them cannot substitute its own key for a party's
//!    (which would let it unmask that party).
//! 3. [`masks`]: each pair of parties derives a shared seed, and from it a mask per
//!    (chain, step, entry) that one adds and the other subtracts in Z_2^128.
//! 4. [`ring`]: a party sends its encoded contribution plus its masks; the masks cancel in
//!    the coordinator's sum, which decodes to the exact integer sum if it cannot wrap.
pub mod announce;
pub mod keys;
pub mod masks;
pub mod ring;

pub use announce::{Announcement, Terms, VerifiedRoster, read_pem_certs};
pub use keys::KeyPair;
pub use masks::PairwiseMasks;
pub use ring::{apply, decode_sum, encode, sum_fits};

/// Why an announcement, a roster or a contribution is refused. Each message is one sentence
/// an operator can act on.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecureError {
    #[error("the OS random source failed: {0}")]
    Random(String),
    #[error("secure aggregation needs at least two parties, the roster has {0}")]
    RosterTooSmall(usize),
    #[error("{0:?} in the roster is not a DNS name (a party is named by its certificate)")]
    BadName(String),
    #[error("a threshold of {threshold} colluding parties leaves no honest party among {parties}")]
    BadThreshold { threshold: u32, parties: usize },
    #[error("cannot read {what}: {reason}")]
    Pem { what: &'static str, reason: String },
    #[error("party {party}'s TLS key cannot sign with ECDSA P-256, ECDSA P-384 or Ed25519")]
    UnsupportedKey { party: String },
    #[error("party {party}'s TLS key failed to sign its announcement: {reason}")]
    Signing { party: String, reason: String },
    #[error("the announcement of party {0} is for another session")]
    WrongSession(String),
    #[error("the announcement of party {0} names another roster than this session's")]
    WrongRoster(String),
    #[error("the announcement of party {0} assumes another threshold of colluding parties")]
    WrongThreshold(String),
    #[error("party {0} is not in the session's roster")]
    NotInRoster(String),
    #[error("party {party} announced the noise multiplier {multiplier}, not a usable number")]
    BadMultiplier { party: String, multiplier: String },
    #[error("party {0} announced an all-zero key")]
    ZeroKey(String),
    #[error(
        "the announcement of party {party} carries no certificate chaining to the CA: {reason}"
    )]
    Untrusted { party: String, reason: String },
    #[error("the certificate in party {claimed}'s announcement is not issued to {claimed}")]
    NameMismatch { claimed: String },
    #[error(
        "the key announced for party {0} is not signed by {0}'s certificate: a coordinator may have substituted it"
    )]
    BadSignature(String),
    #[error("party {0} is announced twice")]
    Duplicate(String),
    #[error("party {0} of the roster has no announcement")]
    Missing(String),
    #[error("the announcement of party {0} does not carry the key this party drew")]
    NotOwnKey(String),
    #[error("party {0} announced a low-order key, which gives no shared secret")]
    LowOrderKey(String),
    #[error("contribution {index} has {got} entries, the first has {expected}")]
    LengthMismatch {
        index: usize,
        got: usize,
        expected: usize,
    },
}
