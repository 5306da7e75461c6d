//! The durable privacy ledger: every reservation and every release is recorded before the
//! answer leaves the process. Reservations and closes are committed to SQLite (WAL) and
//! fsync'd (`synchronous = FULL`); releases are fsync'd too where the machine's boot id
//! cannot be read, and otherwise are not: a release then survives the process dying, and one
//! a machine crash loses is covered by its run's fsync'd reservation, which the next start
//! charges in full (`boot.rs`). 4 chains over gRPC loopback on durable ledgers went from
//! 5 864 to 10 017 it/s in all, 1 chain from 2 324 to 5 647 (one bench run each way). Such
//! releases go to the release log beside the ledger, one write per frame, and reach SQLite
//! in batches (`log.rs`).
//!
//! Each entry is committed by the caller itself, under a lock on the connection: no caller is
//! answered before its own entry is committed. Releases that queue while a commit holds the
//! lock are committed together by the next caller to take it, in one transaction (group
//! commit: one fsync for the group where releases are fsync'd; 4 chains over gRPC loopback
//! on durable ledgers went from 2 835 to 3 110 it/s in all, one bench run each way). A
//! hand-off to a writer thread was measured at ~70 µs per release on these machines (two
//! thread wake-ups), against ~3 µs for the SQLite insert itself; on a multi-threaded runtime
//! a commit that fsyncs runs in `block_in_place`, so an fsync does not stall other tasks.
//!
//! A ledger belongs to one process: [`Ledger::open`] takes an exclusive OS lock (`flock`) on
//! the file before SQLite opens it and holds it as long as the ledger lives. SQLite's own
//! locks serialise transactions, not owners: two parties on one ledger would each admit
//! runs against a total that omits the other's reservations.
use std::collections::HashMap;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

/// The mechanism a release record names when its answer is the same for every dataset (a
/// log-likelihood ratio of θ to itself, `release/`): recorded so that a retry replays it
/// and the chain's step advances, never charged.
pub const PUBLIC_MECHANISM: &str = "public";

/// One answered query: the inputs (to recognise a retry), the noisy value and its variance.
#[derive(Clone, Debug, PartialEq)]
pub struct ReleaseRecord {
    pub run_id: String,
    pub chain: u32,
    pub step: u64,
    /// Mechanism and its noise multiplier: what the accountant composes.
    pub mechanism: String,
    pub noise_multiplier: f64,
    pub inputs: Vec<f64>,
    /// Empty under secure aggregation, where `masked` holds what left.
    pub value: Vec<f64>,
    pub noise_variance: f64,
    pub masked: Option<Masked>,
}

/// A secure-aggregation answer: each entry's grid steps plus the party's masks in Z_2^128,
/// and the grid.
#[derive(Clone, Debug, PartialEq)]
pub struct Masked {
    pub steps: Vec<u128>,
    pub grid: f64,
}

fn u128s_to_blob(v: &[u128]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn blob_to_u128s(b: &[u8]) -> Vec<u128> {
    b.chunks_exact(16)
        .map(|c| u128::from_le_bytes(c.try_into().expect("16-byte chunk")))
        .collect()
}

/// An open run as recovered from disk at start.
#[derive(Clone, Debug)]
pub struct RunRecord {
    pub run_id: String,
    pub terms: RunTerms,
    /// Releases charged (every answer but the public ones).
    pub released: u64,
    /// Answers recorded as [`PUBLIC_MECHANISM`]: uncharged.
    pub public: u64,
    /// The last release of each chain, if any (what a retry may ask for again).
    pub last: Vec<Option<ReleaseRecord>>,
    /// A secure run's session secret (see [`Ledger::open_secure_run`]).
    pub aggregation_secret: Option<[u8; 32]>,
}

/// Why a run was closed; recorded so that a late step is told why, after a restart too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedBy {
    /// Its coordinator called CloseRun (or the ledger predates the lease).
    CloseRun,
    /// The party's lease: no step for `idle_seconds`.
    Lease { idle_seconds: u64 },
    /// Open when the machine stopped without the ledger's clean stop: charged its whole plan,
    /// since releases not yet fsync'd may be missing from the ledger (`boot.rs`).
    Restart,
}

/// What CloseRun answered for a run (or the lease's close computed): recorded with the run, so
/// that a repeated CloseRun, after a restart too, gets this answer and not a later total.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Closed {
    pub releases: u64,
    pub run_epsilon: f64,
    pub epsilon_committed: f64,
}

/// Releases of closed runs with one variant, noise multiplier and batch, summed: what the
/// accountant composes for them, since k releases of one mechanism compose the same run by
/// run or at once.
#[derive(Clone, Debug, PartialEq)]
pub struct ClosedCharge {
    pub variant: String,
    pub noise_multiplier: f64,
    pub batch_size: Option<u64>,
    pub population: Option<u64>,
    pub releases: u64,
}

/// Closed runs as recovered from disk: their ids with why they were closed, and their charge
/// aggregated. No per-chain state, so memory and start-up do not grow with history.
#[derive(Clone, Debug, Default)]
pub struct ClosedRuns {
    pub runs: HashMap<String, ClosedBy>,
    pub charges: Vec<ClosedCharge>,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger {path}: {message}")]
    Storage { path: PathBuf, message: String },
    #[error("ledger {path} is in use by another process; a ledger belongs to one party at a time")]
    InUse { path: PathBuf },
}

pub struct Ledger {
    path: PathBuf,
    /// Declared before `_owner` so that SQLite closes first: closing any descriptor of a file
    /// drops the process's POSIX locks on it, which SQLite relies on while it is open.
    conn: Mutex<Connection>,
    /// Releases waiting for a commit, and the outcomes of those committed by another caller.
    group: Mutex<Group>,
    /// On disk (fsync'd commits) rather than in memory.
    durable: bool,
    /// Releases are committed at `synchronous = NORMAL`, under this boot's marker (`boot.rs`).
    relaxed: bool,
    /// Where a relaxed ledger's releases go before their answers (`log.rs`).
    log: Option<Mutex<ReleaseLog>>,
    /// The exclusive lock on the ledger file, held for the life of the ledger.
    _owner: Option<File>,
}

fn storage(path: &Path, e: rusqlite::Error) -> LedgerError {
    LedgerError::Storage {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn f64s_to_blob(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn blob_to_f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8-byte chunk")))
        .collect()
}

/// A closed run's terms and its charged releases as (noise multiplier, count).
pub type RunReleases = (RunTerms, Vec<(f64, u64)>);

/// Takes the exclusive lock on the ledger file (creating it empty, which SQLite accepts as a
/// new database). `flock` locks the file, not its name: another path, a symlink or a hard
/// link to it meets the same lock.
fn lock(path: &Path) -> Result<File, LedgerError> {
    let io = |e: std::io::Error| LedgerError::Storage {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(LedgerError::InUse {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(e)) => Err(io(e)),
    }
}

impl Ledger {
    /// Opens (or creates) the ledger, owning it exclusively until dropped, and returns it with
    /// the runs it records as open. Closed runs: [`Ledger::closed_runs`].
    pub fn open(path: &Path) -> Result<(Ledger, Vec<RunRecord>), LedgerError> {
        Self::open_at_boot(path, boot::current())
    }

    /// [`Ledger::open`] on the boot `boot` (`None`: unknown, every release fsync'd).
    pub(crate) fn open_at_boot(
        path: &Path,
        boot: Option<String>,
    ) -> Result<(Ledger, Vec<RunRecord>), LedgerError> {
        let owner = lock(path)?;
        let conn = Connection::open(path).map_err(|e| storage(path, e))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| storage(path, e))?;
        Self::start(conn, path, Some(owner), boot, Some(&log::path_beside(path)))
    }

    /// A copy of the ledger at `path` in memory, read without its owner's lock, for
    /// reporting on a party while it serves (`party status`): SQLite's WAL lets a reader see
    /// the last committed state beside the writer. Nothing is written to the file. After a
    /// machine crash the copy is as the next `party serve` will hold it: the runs that were
    /// open are closed at their whole plan.
    pub fn snapshot(path: &Path) -> Result<(Ledger, Vec<RunRecord>), LedgerError> {
        Self::snapshot_at_boot(path, boot::current())
    }

    /// [`Ledger::snapshot`] on the boot `boot`.
    pub(crate) fn snapshot_at_boot(
        path: &Path,
        boot: Option<String>,
    ) -> Result<(Ledger, Vec<RunRecord>), LedgerError> {
        if !path.is_file() {
            return Err(LedgerError::Storage {
                path: path.to_path_buf(),
                message: "no ledger file: the party has not served yet".into(),
            });
        }
        let mut conn = Connection::open_in_memory().map_err(|e| storage(path, e))?;
        conn.restore(
            rusqlite::MAIN_DB,
            path,
            None::<fn(rusqlite::backup::Progress)>,
        )
        .map_err(|e| storage(path, e))?;
        Self::start(conn, path, None, boot, Some(&log::path_beside(path)))
    }

    /// A ledger that lives in memory only: the same code path without the fsync, for
    /// federations simulated inside one process (tests, benchmarks), where a restart loses
    /// the data as well as the ledger. A served party always uses [`Ledger::open`].
    ///
    /// On SQLite's memdb VFS (private to this connection), not `:memory:`: a `:memory:`
    /// database keeps every page in its page cache, and a commit's cache truncation scanned
    /// it, so a release's cost grew with the ledger (a test of 640 000 releases per party
    /// spent 46 % of its time there). The memdb VFS keeps the pages in a buffer behind the
    /// usual bounded cache. Its buffer is capped at SQLite's default 1 GiB (millions of
    /// releases), past which a release fails with a storage error and is not answered.
    pub fn in_memory() -> Result<Ledger, LedgerError> {
        let path = Path::new(":memory:");
        // rusqlite opens URIs by default; a name without a leading '/' is private.
        let conn = Connection::open("file:ledger?vfs=memdb").map_err(|e| storage(path, e))?;
        Ok(Self::start(conn, path, None, None, None)?.0)
    }

    /// `owner` is the lock of a durable ledger (an in-memory one has none and no fsync),
    /// `boot` the machine's boot id if known, and `log` the release log to read back first
    /// (`log.rs`): an owner then empties it, and appends to it if releases are relaxed.
    fn start(
        conn: Connection,
        path: &Path,
        owner: Option<File>,
        boot: Option<String>,
        log: Option<&Path>,
    ) -> Result<(Ledger, Vec<RunRecord>), LedgerError> {
        let sql = |e| storage(path, e);
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql)?;
        conn.execute_batch(SCHEMA).map_err(sql)?;
        conn.execute_batch(boot::SCHEMA).map_err(sql)?;
        migrate(&conn).map_err(sql)?;
        if let Some(log) = log {
            log::replay(&conn, log)?;
        }
        if let Some(boot) = &boot {
            for run_id in boot::start(&conn, boot).map_err(sql)? {
                tracing::warn!(
                    run_id,
                    "run closed at its whole plan: it was open when the machine stopped \
                     without this ledger's clean stop"
                );
            }
        }
        // Only a durable ledger on a known boot commits releases without their own fsync.
        let relaxed = owner.is_some() && boot.is_some();
        if relaxed {
            conn.pragma_update(None, "synchronous", "NORMAL")
                .map_err(sql)?;
        }
        let runs = read_open_runs(&conn).map_err(sql)?;
        // Read back under `synchronous = FULL` above, so the log can be emptied.
        let log = match (log, &owner) {
            (Some(log), Some(_)) => Some(ReleaseLog::open(log)?),
            _ => None,
        };
        Ok((
            Ledger {
                path: path.to_path_buf(),
                conn: Mutex::new(conn),
                group: Mutex::new(Group::default()),
                durable: owner.is_some(),
                log: log.filter(|_| relaxed).map(Mutex::new),
                relaxed,
                _owner: owner,
            },
            runs,
        ))
    }

    /// The closed runs this ledger records, read in two queries whatever their number.
    pub fn closed_runs(&self) -> Result<ClosedRuns, LedgerError> {
        let conn = self.conn.lock().expect("ledger lock");
        read_closed_runs(&conn).map_err(|e| storage(&self.path, e))
    }

    /// A read that may wait for the connection while a commit fsyncs: off the worker then.
    fn read<T>(
        &self,
        query: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, LedgerError> {
        let read = || {
            let conn = self.conn.lock().expect("ledger lock");
            query(&conn).map_err(|e| storage(&self.path, e))
        };
        if self.durable {
            crate::blocking(read)
        } else {
            read()
        }
    }

    /// The answer recorded when the closed run `run_id` was closed, if one was.
    pub fn answer(&self, run_id: &str) -> Result<Option<Closed>, LedgerError> {
        self.read(|conn| read::answer(conn, run_id))
    }

    /// A closed run's terms and its charged releases counted per noise multiplier (in
    /// ascending order); `None` if the ledger records no closed run `run_id`.
    pub fn released(&self, run_id: &str) -> Result<Option<RunReleases>, LedgerError> {
        self.read(|conn| read::released(conn, run_id))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Commits a reservation, a close or an answer, fsync'd even when releases are not: after
    /// merging the release log, whose releases that fsync then covers, so it is emptied.
    async fn commit(&self, entry: Entry<'_>) -> Result<(), LedgerError> {
        let write = || {
            let mut log = self
                .log
                .as_ref()
                .map(|l| l.lock().expect("release log lock"));
            let conn = self.conn.lock().expect("ledger lock");
            if let Some(Err(e)) = log.as_mut().map(|l| l.merge(&conn)) {
                return vec![Err(e)];
            }
            let written = self.fsynced(&conn, |c| write_entry(c, &entry));
            if written.is_ok()
                && let Some(Err(e)) = log.as_mut().map(|l| l.clear())
            {
                tracing::warn!(error = %e, "the release log was not emptied; it is read back at the next start");
            }
            vec![written]
        };
        self.committing(self.durable, write)
            .pop()
            .expect("one entry, one outcome")
    }

    /// Runs `write` under `synchronous = FULL`.
    fn fsynced(
        &self,
        conn: &Connection,
        write: impl FnOnce(&Connection) -> rusqlite::Result<()>,
    ) -> Result<(), LedgerError> {
        let sync = |level| conn.pragma_update(None, "synchronous", level);
        if self.relaxed {
            sync("FULL").map_err(|e| storage(&self.path, e))?;
        }
        let written = write(conn);
        if self.relaxed {
            sync("NORMAL").map_err(|e| storage(&self.path, e))?;
        }
        written.map_err(|e| storage(&self.path, e))
    }

    /// Runs a commit, off the worker when it fsyncs (moving the worker aside costs a thread
    /// hand-off: worth it only around an fsync), and logs its failure.
    fn committing(
        &self,
        fsyncs: bool,
        write: impl FnOnce() -> Vec<Result<(), LedgerError>>,
    ) -> Vec<Result<(), LedgerError>> {
        let outcomes = if fsyncs {
            crate::blocking(write)
        } else {
            write()
        };
        if let Some(Err(e)) = outcomes.iter().find(|o| o.is_err()) {
            tracing::error!(error = %e, "ledger commit failed; nothing is answered");
        }
        outcomes
    }

    /// Durably reserves a run's whole plan.
    pub async fn open_run(&self, run_id: &str, terms: &RunTerms) -> Result<(), LedgerError> {
        self.commit(Entry::Open {
            run_id,
            terms,
            secret: None,
        })
        .await
    }

    /// [`Ledger::open_run`] of a secure-aggregation run, with its session's X25519 secret:
    /// kept beside the rows it protects (never in the terms, which `party status` shows), so
    /// that after a restart the run's masks can be derived again.
    pub async fn open_secure_run(
        &self,
        run_id: &str,
        terms: &RunTerms,
        secret: &[u8; 32],
    ) -> Result<(), LedgerError> {
        self.commit(Entry::Open {
            run_id,
            terms,
            secret: Some(secret),
        })
        .await
    }

    /// Records `records` (one step's release, or every chain's of one frame); returns each
    /// one's outcome, in order, only once it is committed (fsync'd, or covered by its run's
    /// fsync'd reservation: `boot.rs`). A relaxed ledger writes them to its release log
    /// (`log.rs`); elsewhere, releases that arrive while another commit holds the
    /// connection are committed together by the next caller to take it (group commit): one
    /// transaction for all of them, in which a refused insert fails only its own release.
    /// A caller whose releases another caller committed takes those outcomes; none is
    /// answered before the transaction holding its release is committed.
    pub async fn record_releases(&self, records: &[ReleaseRecord]) -> Vec<Result<(), LedgerError>> {
        if records.is_empty() {
            return Vec::new();
        }
        if let Some(log) = &self.log {
            return self.logged(log, records);
        }
        // All of one caller's releases join the queue at once, so one commit takes them all.
        let first = {
            let mut group = self.group.lock().expect("ledger group lock");
            let first = group.next;
            group.next += records.len() as u64;
            let tickets = first..;
            group.queue.extend(tickets.zip(records.iter().cloned()));
            first
        };
        let mine = first..first + records.len() as u64;
        let write = || {
            let conn = self.conn.lock().expect("ledger lock");
            let batch = {
                let mut group = self.group.lock().expect("ledger group lock");
                if group.done.contains_key(&first) {
                    return mine
                        .clone()
                        .map(|t| group.done.remove(&t).expect("committed together"))
                        .collect();
                }
                std::mem::take(&mut group.queue)
            };
            let entries: Vec<Entry<'_>> = batch.iter().map(|(_, r)| Entry::Release(r)).collect();
            let outcomes: Vec<Result<(), LedgerError>> = match write_releases(&conn, &entries) {
                Ok(each) => each
                    .into_iter()
                    .map(|r| r.map_err(|e| storage(&self.path, e)))
                    .collect(),
                Err(e) => vec![Err(storage(&self.path, e)); batch.len()],
            };
            let mut group = self.group.lock().expect("ledger group lock");
            let mut answers = Vec::with_capacity(records.len());
            for ((t, _), outcome) in batch.iter().zip(outcomes) {
                if mine.contains(t) {
                    answers.push(outcome);
                } else {
                    group.done.insert(*t, outcome);
                }
            }
            assert_eq!(
                answers.len(),
                records.len(),
                "a caller's releases are committed by it or before it, together"
            );
            answers
        };
        // Relaxed, a release's commit stays on the worker: it only writes to the WAL (SQLite's
        // checkpoint, every ~1 000 pages, still fsyncs there).
        self.committing(self.durable && !self.relaxed, write)
    }

    /// [`Ledger::record_releases`] on a relaxed ledger: one write to the release log, and
    /// now and then a merge of it into SQLite (`log.rs`).
    fn logged(
        &self,
        log: &Mutex<ReleaseLog>,
        records: &[ReleaseRecord],
    ) -> Vec<Result<(), LedgerError>> {
        let mut log = log.lock().expect("release log lock");
        let outcomes = log.append(records, &self.conn);
        if let Some(Err(e)) = outcomes.iter().find(|o| o.is_err()) {
            tracing::error!(error = %e, "a release was not logged; it is not answered");
        }
        if log.full() {
            let conn = self.conn.lock().expect("ledger lock");
            if let Err(e) = log.merge(&conn) {
                tracing::warn!(error = %e, "merging the release log failed; it is tried again");
            }
        }
        outcomes
    }

    /// Durably closes a run: from now on it is charged for what it released.
    pub async fn close_run(&self, run_id: &str, by: ClosedBy) -> Result<(), LedgerError> {
        self.commit(Entry::Close { run_id, by }).await?;
        if let Some(log) = &self.log {
            log.lock().expect("release log lock").forget(run_id);
        }
        Ok(())
    }

    /// Durably records what a closed run's close answered.
    pub async fn record_answer(&self, run_id: &str, closed: &Closed) -> Result<(), LedgerError> {
        self.commit(Entry::Answer { run_id, closed }).await
    }
}

impl Drop for Ledger {
    /// The clean stop: an fsync'd marker, which covers every release before it.
    fn drop(&mut self) {
        if !self.relaxed {
            return;
        }
        let mut log = self
            .log
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        // Unmerged, logged releases are not fsync'd: the stop is not clean then.
        let stopped = match log.as_mut().map(|l| l.merge(&conn)) {
            Some(Err(e)) => Err(e),
            _ => self.fsynced(&conn, boot::stop),
        };
        match stopped {
            Ok(()) => {
                if let Some(Err(e)) = log.as_mut().map(|l| l.clear()) {
                    tracing::warn!(error = %e, "the release log was not emptied; it is read back at the next start");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "the ledger's clean stop was not recorded; its open runs will be charged their whole plans after a reboot")
            }
        }
    }
}

mod boot;
mod log;
mod read;
mod schema;
mod terms;
mod write;
use log::ReleaseLog;
use read::{read_closed_runs, read_open_runs};
use schema::{SCHEMA, migrate};
pub use terms::{AggregationTerms, HmcTerms, RunTerms};
use write::{Entry, Group, write_entry, write_releases};

#[cfg(test)]
mod tests;
