//! Secure aggregation on the coordinator's side: a fresh session per run, the key relay, each
//! masked share checked against what an honest party adds, and the decoded sum
//! (the party's side and the argument are in `fedmcmc_party::aggregation`).
//!
//! # What τ means under secure aggregation
//!
//! τ fixes the noise in the **sum**, as for plain releases: σ² = τ²·n·Δ² over the pooled n
//! rows, so the sampler sees the same noise whatever t is. With P parties of which t may
//! collude with the coordinator, a party's protection is the honest shares only,
//! (P − t)/P of σ²: its noise multiplier is τ·√(n·(P − t)/P), and the party is asked for
//! τᵢ = τ·√(n·(P − t)/(P·nᵢ)) over its own nᵢ rows ([`tau_for`]). At t = 0 that is the
//! pooled τ·√n: the parties together get the iterations one party holding every row would;
//! at t = P − 1 each is protected by its own share alone, as under plain releases.
use fedmcmc_party::secure::{Announcement, Terms};

use super::{CallError, CallErrorKind, PartyInfo};

/// Whether a party's answer is secure aggregation's: the masked grid steps of its share.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Masked {
    pub steps: Vec<u128>,
    pub grid: f64,
}

/// A fresh session for one run over `parties` tolerating `threshold` colluders: 32 bytes
/// from the OS (masks never repeat across runs), the roster of their names.
pub fn session(parties: &[PartyInfo], threshold: u32) -> Result<Terms, String> {
    let mut session = [0u8; 32];
    rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut session)
        .map_err(|e| format!("the OS random source failed: {e}"))?;
    let roster = parties.iter().map(|p| p.name.clone()).collect();
    Terms::new(session, roster, threshold).map_err(|e| e.to_string())
}

/// The rows whose pooled noise protects each party at `threshold`: n·(P − t)/P.
pub fn protecting_rows(parties: &[PartyInfo], threshold: u32) -> f64 {
    let total: u64 = parties.iter().map(|p| p.rows).sum();
    let p = parties.len() as f64;
    total as f64 * (p - f64::from(threshold)) / p
}

/// The τ to ask of `party` so that its multiplier is τ·√(n·(P − t)/P) (module doc).
pub fn tau_for(tau: f64, party: &PartyInfo, parties: &[PartyInfo], threshold: u32) -> f64 {
    tau * (protecting_rows(parties, threshold) / party.rows as f64).sqrt()
}

/// Every grant's announcement, in party order, or the first party that gave none.
pub(super) fn announcements(
    grants: &[fedmcmc_party::node::Grant],
) -> Result<Vec<Announcement>, (usize, CallError)> {
    grants
        .iter()
        .enumerate()
        .map(|(i, g)| {
            g.announcement.clone().ok_or_else(|| {
                let message = "granted a secure run without announcing a session key".to_string();
                (
                    i,
                    CallError {
                        kind: CallErrorKind::Other,
                        message,
                    },
                )
            })
        })
        .collect()
}

/// The parties' masked shares summed in Z_2^128 and decoded: the sum's entries as
/// multiples of the common grid. Every party must have answered on the same grid with as
/// many entries; a sum with a party missing would decode to noise (its masks uncancelled),
/// so there is none.
pub(super) fn decode(shares: &[&Masked]) -> Result<Vec<f64>, String> {
    let grid = shares.first().map_or(1.0, |m| m.grid);
    if shares.iter().any(|m| m.grid != grid) {
        return Err("the parties answered on different grids".into());
    }
    let steps: Vec<Vec<u128>> = shares.iter().map(|m| m.steps.clone()).collect();
    let sums = fedmcmc_party::secure::decode_sum(&steps).map_err(|e| e.to_string())?;
    Ok(sums.into_iter().map(|k| k as f64 * grid).collect())
}

/// `--aggregation`: secure where every party can and the variant allows (`auto`), or
/// insisted on, or plain releases.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Aggregation {
    #[default]
    Auto,
    Secure,
    Plain,
}

/// Decides the aggregation of a job running `variant` (the parties' name) over `parties`
/// with `threshold` colluders tolerated: the threshold if secure, and one sentence saying
/// which and why, for the output.
pub fn choose(
    parties: &[PartyInfo],
    variant: &str,
    asked: Aggregation,
    threshold: u32,
) -> Result<(Option<u32>, String), String> {
    let p = parties.len();
    let obstacle = if p < 2 {
        Some("one party has no one to share its noise with".to_string())
    } else if let Some(q) = parties.iter().find(|q| !q.secure_aggregation) {
        Some(format!(
            "party {} does not take part in secure aggregation (it serves without TLS)",
            q.name
        ))
    } else if !fedmcmc_party::aggregation::SECURE_VARIANTS.contains(&variant) {
        Some(format!(
            "the {variant} variant's noise depends on each party's own rows"
        ))
    } else if threshold as usize >= p {
        Some(format!(
            "a threshold of {threshold} colluding parties leaves none of the {p} honest"
        ))
    } else {
        None
    };
    match (asked, obstacle) {
        (Aggregation::Plain, _) => Ok((None, "plain releases (asked for): each party adds all of its noise and the coordinator sees each contribution".into())),
        (Aggregation::Secure, Some(why)) => Err(format!("secure aggregation is not possible: {why}")),
        (Aggregation::Auto, Some(why)) => Ok((None, format!("plain releases: {why}"))),
        (_, None) => Ok((
            Some(threshold),
            format!(
                "secure (Heikkilä et al. 2017; Kairouz, Liu & Steinke 2021): each of the {p} parties adds 1/{} of the noise, masked so that only the sum decodes; {}",
                p - threshold as usize,
                match threshold {
                    0 => "private as long as no party colludes with the coordinator (--collusion raises that)".to_string(),
                    t => format!("private against the coordinator colluding with up to {t} of them"),
                }
            ),
        )),
    }
}
