//! Secure aggregation on the party's side: a run's session, its key until the join, its
//! pairwise masks after it, and the share of the noise each release adds (the cryptography
//! is in `secure/`; the release path in `release/` calls [`share`] and [`Joined::mask`]).
//!
//! # Why a share is enough
//!
//! With N parties of which at most t collude with the coordinator, each adds discrete
//! Gaussian noise of variance σ²/(N − t) to its rounded statistic and masks the result; the
//! coordinator learns only the sum, which carries at least N − t honest shares, σ² in all
//! (Heikkilä et al. 2017, Sec. 3; Kairouz, Liu & Steinke 2021 for discrete noise under
//! secure aggregation; Bonawitz et al. 2017 for the masks).
//!
//! σ is common to the run: every party announces its noise multiplier over the add/remove
//! (unit) sensitivity, s·c with c = 2 under substitution and 1 under addition or removal,
//! signed with its key; every party takes the largest, m, so each honest share is
//! (m·(Δ_u + √d·γ))²/(N − t) with Δ_u the step's unit sensitivity (the same public function
//! of the step on every party), d the entries and γ the common grid of m·Δ_u/√(N − t). For
//! party i the honest sum then carries noise of standard deviation m·(Δ_u + √d·γ) ≥
//! sᵢ·(cᵢ·Δ_u + √d·γ): at least its own multiplier over its rounded statistic's
//! sensitivity, so what its accountant charges at sᵢ holds.
//!
//! The honest sum of N − t independent N_Z(0, v) is not itself a discrete Gaussian.
//! Kairouz, Liu & Steinke 2021 bound its probabilities pointwise within a factor 1 ± τ of
//! N_Z(0, (N − t)·v) with τ = 10·Σ_{k=1}^{N−t−1} e^{−2π²v·k/(k+1)}, v in grid units² (their
//! analysis of the sum of discrete Gaussians, as we read it); with v ≥ 2^60 here τ is below
//! e^{−2^60}, so the closeness argument of `fedmcmc_common::mechanism` (against rounded
//! continuous noise of the total variance, at least 2^60 grid units²) and its reservation
//! hold for the sum as they do for one party's noise.
//!
//! Minibatch and Barker releases are refused under secure aggregation: their sensitivity and
//! noise depend on each party's own row count (a = n/b) and, for Barker, on each batch's
//! variance, so no common share exists without a derivation this product does not make.
use std::sync::{Mutex, OnceLock};

use fedmcmc_common::mechanism::{GaussianMechanism, GridGaussian};
use fedmcmc_common::neighbours::Neighbours;
use rustls_pki_types::CertificateDer;

use crate::error::PartyError;
use crate::ledger::{AggregationTerms, RunTerms};
use crate::secure::{
    Announcement, KeyPair, PairwiseMasks, Terms, VerifiedRoster, apply, encode, read_pem_certs,
};
use crate::statistics::{Bound, Query};
use crate::tls::TlsFiles;
use crate::variants::{FULL_PENALTY, HMC, INITIALISER, SUFFICIENT_STATISTICS, SUMMARIES};

/// The variants whose releases a party adds a share of noise to under secure aggregation.
pub const SECURE_VARIANTS: [&str; 5] = [
    FULL_PENALTY,
    HMC,
    INITIALISER,
    SUFFICIENT_STATISTICS,
    SUMMARIES,
];

/// The node's TLS identity, which signs its key announcements, and the CA its peers'
/// certificates must chain to.
pub struct Identity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    ca: Vec<CertificateDer<'static>>,
}

impl Identity {
    pub fn from_pem(cert_pem: Vec<u8>, key_pem: Vec<u8>, ca_pem: &[u8]) -> anyhow::Result<Self> {
        let ca = read_pem_certs("the CA certificate", ca_pem)?;
        Ok(Identity {
            cert_pem,
            key_pem,
            ca,
        })
    }

    /// The identity in a node's TLS files.
    pub fn load(files: &TlsFiles) -> anyhow::Result<Self> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))
        };
        Self::from_pem(read(&files.cert)?, read(&files.key)?, &read(&files.ca)?)
    }
}

/// One run's secure-aggregation state.
pub(crate) struct Aggregation {
    pub terms: Terms,
    /// The session's secret key until the join derives the masks from it.
    key: Mutex<Option<KeyPair>>,
    pub announcement: Announcement,
    joined: OnceLock<Joined>,
}

/// What the join established: the masks and the run's common multipliers (the largest
/// announced): m, and a DP HMC run's gradient one.
pub(crate) struct Joined {
    masks: PairwiseMasks,
    pub multiplier: f64,
    pub gradient_multiplier: f64,
    announcements: Vec<Announcement>,
}

/// A refused or impossible aggregation step, as the party's error.
pub(crate) fn refused(e: impl std::fmt::Display) -> PartyError {
    PartyError::FailedPrecondition(format!("secure aggregation: {e}"))
}

impl Aggregation {
    /// Draws the session key and signs its announcement with `multipliers` (the party's
    /// noise multiplier over the unit sensitivity, and a DP HMC run's gradient one or 0).
    pub(crate) fn open(
        identity: Option<&Identity>,
        party: &str,
        terms: Terms,
        multipliers: (f64, f64),
    ) -> Result<Self, PartyError> {
        let identity = identity.ok_or_else(|| {
            PartyError::Unimplemented(
                "secure aggregation needs the party's TLS certificate and key to sign its session key; this party serves without TLS".into(),
            )
        })?;
        if !terms.roster.iter().any(|name| name == party) {
            return Err(PartyError::InvalidArgument(format!(
                "secure aggregation: this party ({party}) is not in the run's roster"
            )));
        }
        let key = KeyPair::generate().map_err(refused)?;
        let announcement = Announcement::sign(
            &terms,
            party,
            key.public(),
            multipliers,
            &identity.cert_pem,
            &identity.key_pem,
        )
        .map_err(refused)?;
        Ok(Aggregation {
            terms,
            key: Mutex::new(Some(key)),
            announcement,
            joined: OnceLock::new(),
        })
    }

    /// The state of a run read back from the ledger after a restart: its terms and own
    /// announcement, and the session secret kept beside them, not yet joined (the
    /// coordinator joins again). `None` if the record does not hold together (then the
    /// run's steps are refused, [`session`]).
    pub(crate) fn restore(terms: &AggregationTerms, secret: [u8; 32]) -> Option<Self> {
        let t = terms.terms()?;
        let key = KeyPair::from_bytes(secret);
        (key.public() == terms.announcement.key).then(|| Aggregation {
            terms: t,
            key: Mutex::new(Some(key)),
            announcement: terms.announcement.clone(),
            joined: OnceLock::new(),
        })
    }

    /// The session secret, while the run is not joined: what the ledger keeps.
    pub(crate) fn secret(&self) -> Option<zeroize::Zeroizing<[u8; 32]>> {
        self.key
            .lock()
            .expect("key lock")
            .as_ref()
            .map(KeyPair::secret_bytes)
    }

    /// Verifies every party's announcement against the CA and the run's terms, derives the
    /// pairwise masks and answers the common multiplier m (the largest announced). A second
    /// join with the same announcements gets the same answer; with others, a refusal.
    pub(crate) fn join(
        &self,
        identity: Option<&Identity>,
        party: &str,
        announcements: Vec<Announcement>,
    ) -> Result<f64, PartyError> {
        // One join at a time: concurrent steps of a restarted party may all ask for it.
        let mut key = self.key.lock().expect("key lock");
        if let Some(joined) = self.joined.get() {
            return if joined.announcements == announcements {
                Ok(joined.multiplier)
            } else {
                Err(refused("the run was joined with other announcements"))
            };
        }
        let identity = identity.ok_or_else(|| {
            refused("this party has no TLS identity to verify the announcements with")
        })?;
        let roster = VerifiedRoster::verify(announcements.clone(), &identity.ca, &self.terms)
            .map_err(refused)?;
        let own = key
            .as_ref()
            .ok_or_else(|| refused("the session key is gone: the run cannot be joined"))?;
        let masks = PairwiseMasks::derive(own, party, &roster).map_err(refused)?;
        let (multiplier, gradient_multiplier) = common_multipliers(roster.announcements());
        let joined = Joined {
            masks,
            multiplier,
            gradient_multiplier,
            announcements,
        };
        // Set once: every join holds the key lock and returned above if it was set.
        let _ = self.joined.set(joined);
        // The masks are derived: the secret is no longer needed in memory (the ledger keeps
        // it for a restart).
        *key = None;
        Ok(multiplier)
    }

    /// The join's state, or why a step cannot be answered yet.
    pub(crate) fn joined(&self) -> Result<&Joined, PartyError> {
        self.joined.get().ok_or_else(|| {
            PartyError::Unjoined(
                "secure aggregation: the run has not been joined since this party started: relay every party's announcement first".into(),
            )
        })
    }

    /// Honest parties N − t, and N.
    pub(crate) fn honest(&self) -> (u32, usize) {
        let n = self.terms.roster.len();
        (n as u32 - self.terms.threshold, n)
    }
}

/// The largest multipliers announced: the run's common release and gradient multipliers.
pub fn common_multipliers(announcements: &[Announcement]) -> (f64, f64) {
    announcements.iter().fold((0.0, 0.0), |(m, g), a| {
        (
            f64::max(m, a.multiplier),
            f64::max(g, a.gradient_multiplier),
        )
    })
}

/// The common multiplier of `query`'s release in a run with `terms`: DP HMC's gradient
/// releases have their own; every other release (the initialiser's gradients among them)
/// the run's.
pub fn multiplier_for(query: &Query<'_>, terms: &RunTerms, (m, gradient): (f64, f64)) -> f64 {
    match (query, terms.hmc) {
        (Query::Gradient { .. }, Some(_)) => gradient,
        _ => m,
    }
}

impl Joined {
    /// `steps` (grid units) encoded in Z_2^128 plus this party's masks for (chain, step).
    pub(crate) fn mask(&self, chain: u32, step: u64, steps: &[i128]) -> Vec<u128> {
        let mut masked: Vec<u128> = steps.iter().map(|&k| encode(k)).collect();
        apply(&mut masked, &self.masks.mask(chain, step, steps.len()));
        masked
    }
}

/// The share of noise a party adds to a release of `entries` entries with `bound` under
/// secure aggregation with common multiplier `multiplier`, `honest` honest parties of
/// `parties`: the mechanism of multiplier m/√honest over the unit sensitivity Δ_u, on its
/// grid (module doc). Every party computes the same grid and share from the same public
/// step. Refused, from public numbers, where the parties' summed bounds (statistic plus 64
/// noise sds, each in grid steps) could reach 2^126: the ring Z_2^128 could then wrap.
pub fn share(
    bound: &Bound,
    neighbours: Neighbours,
    multiplier: f64,
    (honest, parties): (u32, usize),
    entries: usize,
) -> Result<Option<GridGaussian>, PartyError> {
    let unit = bound.sensitivity / neighbours.clipped_sum_sensitivity(1.0);
    let mechanism = GaussianMechanism {
        sensitivity: unit,
        noise_multiplier: multiplier / f64::from(honest).sqrt(),
    };
    if unit == 0.0 {
        return Ok(None);
    }
    let share = mechanism.on_grid(entries).ok_or_else(|| {
        PartyError::InvalidArgument(format!(
            "the run's common noise multiplier {multiplier:e} over {entries} entries is beyond what a party releases on its grid"
        ))
    })?;
    let reach = (bound.statistic + 64.0 * share.mechanism.std()) / share.grid;
    if reach.is_nan() || reach * parties as f64 >= 2f64.powi(126) {
        return Err(PartyError::InvalidArgument(format!(
            "the statistic could reach {:e} on the run's grid of {:e}: summed over {parties} parties it could wrap secure aggregation's ring; take a shorter step",
            bound.statistic, share.grid
        )));
    }
    Ok(Some(share))
}
