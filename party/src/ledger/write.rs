//! The ledger's write path: one entry as one statement, and a group of releases as one
//! transaction.
use std::collections::HashMap;

use rusqlite::{Connection, params};

use super::{Closed, ClosedBy, LedgerError, ReleaseRecord, RunTerms, f64s_to_blob, u128s_to_blob};

/// What a commit writes.
pub(super) enum Entry<'a> {
    Open {
        run_id: &'a str,
        terms: &'a RunTerms,
        secret: Option<&'a [u8; 32]>,
    },
    Release(&'a ReleaseRecord),
    /// A release read back from the release log (`log.rs`) at start: it may have been merged
    /// before the process stopped, so one already recorded is left as it is.
    Replayed(&'a ReleaseRecord),
    Close {
        run_id: &'a str,
        by: ClosedBy,
    },
    Answer {
        run_id: &'a str,
        closed: &'a Closed,
    },
}

/// Releases queued for the next commit (ticketed in arrival order) and the outcomes of those a
/// caller committed for others.
#[derive(Default)]
pub(super) struct Group {
    pub(super) next: u64,
    pub(super) queue: Vec<(u64, ReleaseRecord)>,
    pub(super) done: HashMap<u64, Result<(), LedgerError>>,
}

/// Commits `batch` in one transaction: the outcome of each release, or the error that left
/// none committed. A release refused by a constraint (its (run, step, chain) already
/// recorded) fails alone: SQLite backs out the failed statement and keeps the transaction,
/// so the others commit with it and no savepoint per release is needed (three statements
/// fewer each). An error that ends the transaction (SQLite may roll it back on a full disk
/// or an I/O error) fails them all. One release is one autocommit statement.
pub(super) fn write_releases(
    conn: &Connection,
    batch: &[Entry<'_>],
) -> rusqlite::Result<Vec<rusqlite::Result<()>>> {
    if let [only] = batch {
        return Ok(vec![write_entry(conn, only)]);
    }
    // Prepared once per connection: parsing each statement anew was a good part of a frame's
    // commit once releases stopped waiting for an fsync.
    let run = |sql: &str| conn.prepare_cached(sql)?.execute([]).map(|_| ());
    let each = || -> rusqlite::Result<Vec<rusqlite::Result<()>>> {
        run("BEGIN IMMEDIATE")?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for entry in batch {
            match write_entry(conn, entry) {
                Err(e) if conn.is_autocommit() => return Err(e),
                outcome => outcomes.push(outcome),
            }
        }
        run("COMMIT")?;
        Ok(outcomes)
    };
    each().inspect_err(|_| {
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
    })
}

/// A release's insert, the same columns whatever the verb.
macro_rules! insert_release {
    ($verb:literal) => {
        concat!(
            $verb,
            " INTO releases (run_id, chain, step, mechanism, noise_multiplier, inputs, value, noise_variance, masked, grid)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        )
    };
}

/// One entry, one statement, which SQLite runs as a transaction of its own (autocommit):
/// committed when the statement returns (fsync'd under `synchronous = FULL`). An explicit
/// BEGIN and COMMIT would add nothing but two statements to parse and run per release.
pub(super) fn write_entry(conn: &Connection, entry: &Entry<'_>) -> rusqlite::Result<()> {
    match entry {
        Entry::Open {
            run_id,
            terms,
            secret,
        } => {
            let terms = serde_json::to_string(terms).expect("run terms serialise");
            conn.execute(
                "INSERT INTO runs (run_id, terms, aggregation_secret) VALUES (?1, ?2, ?3)",
                params![run_id, terms, secret.map(|s| s.to_vec())],
            )?;
        }
        Entry::Release(r) | Entry::Replayed(r) => {
            let sql = match entry {
                Entry::Replayed(_) => insert_release!("INSERT OR IGNORE"),
                _ => insert_release!("INSERT"),
            };
            conn.prepare_cached(sql)?.execute(params![
                r.run_id,
                r.chain,
                r.step as i64,
                r.mechanism,
                r.noise_multiplier,
                f64s_to_blob(&r.inputs),
                f64s_to_blob(&r.value),
                r.noise_variance,
                r.masked.as_ref().map(|m| u128s_to_blob(&m.steps)),
                r.masked.as_ref().map(|m| m.grid)
            ])?;
        }
        Entry::Close { run_id, by } => {
            let idle_seconds = match by {
                ClosedBy::Lease { idle_seconds } => Some(*idle_seconds as i64),
                ClosedBy::CloseRun | ClosedBy::Restart => None,
            };
            conn.execute(
                "UPDATE runs SET closed = 1, closed_idle_seconds = ?2, closed_at_plan = ?3
                 WHERE run_id = ?1",
                params![run_id, idle_seconds, *by == ClosedBy::Restart],
            )?;
        }
        Entry::Answer { run_id, closed } => {
            conn.execute(
                "UPDATE runs SET answer_releases = ?2, answer_run_epsilon = ?3,
                                 answer_epsilon_committed = ?4
                 WHERE run_id = ?1 AND closed = 1",
                params![
                    run_id,
                    closed.releases as i64,
                    closed.run_epsilon,
                    closed.epsilon_committed
                ],
            )?;
        }
    }
    Ok(())
}
