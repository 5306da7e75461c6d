//! The release log: where a relaxed ledger (`boot.rs`) puts a release before its answer
//! leaves, in one `write` per frame, instead of an SQLite commit per frame.
//!
//! A write to the file reaches the OS's page cache before the answer is sent, so it survives
//! the party's process dying as an SQLite commit at `synchronous = NORMAL` does, and a
//! machine crash may lose it as it may lose such a commit: the runs then open are closed at
//! their whole plan (`boot.rs`). So what a crash costs is unchanged. The releases are merged
//! into SQLite in batches ([`MERGE_EVERY`]) and always before an fsync'd entry (a run's
//! open, close or answer, the clean stop), which also lets the log be emptied. At start the
//! log is read back into SQLite before anything else (a record already merged is left as
//! it is), and a retried step finds its release there as before.
//!
//! Each record is its length, a CRC-32 of its bytes, and the bytes: a record cut short or
//! damaged (a machine crash in the middle of a write; a process killed in one never sent
//! its answer) ends the reading; the file is emptied once the whole records before it are
//! in SQLite, before anything is appended, so nothing written later can hide behind it.
//!
//! Over gRPC loopback (flat banana, 10⁵ rows, 3 parties, durable ledgers; the iterations
//! bench alternated with the build that committed each frame to SQLite, issue 25) it took 1
//! chain from 2 719–3 038 to 3 727–5 136 it/s and 4 chains from 6 043–6 858 to 8 218–9 702.
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::Connection;

use super::write::{Entry, write_releases};
use super::{LedgerError, Masked, ReleaseRecord};

/// Releases logged but not yet merged that make the next frame merge them: one SQLite
/// transaction per this many releases instead of one per frame.
pub(super) const MERGE_EVERY: usize = 512;

/// The log beside the ledger at `ledger`.
pub(super) fn path_beside(ledger: &Path) -> PathBuf {
    let mut name = ledger.as_os_str().to_owned();
    name.push(".releases");
    PathBuf::from(name)
}

/// An open release log and the releases in it not yet merged into SQLite.
pub(super) struct ReleaseLog {
    file: File,
    path: PathBuf,
    /// Bytes of whole records in the file: where the next record goes, and where a failed
    /// write is cut back to.
    len: u64,
    /// A failed write could not be cut off: nothing more is appended.
    damaged: bool,
    pending: Vec<ReleaseRecord>,
    /// The last step released for each chain of each open run (`None`: none yet), read
    /// from SQLite the first time a chain is met: a release at or before it is refused, as
    /// SQLite's key refuses a step recorded twice. The node never asks for one; this keeps
    /// the ledger's own check where its key is not consulted before the answer.
    last: HashMap<String, HashMap<u32, Option<u64>>>,
}

fn io(path: &Path, e: std::io::Error) -> LedgerError {
    LedgerError::Storage {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl ReleaseLog {
    /// Opens the log at `path` for appending, empty: [`replay`] has merged what it held.
    pub(super) fn open(path: &Path) -> Result<ReleaseLog, LedgerError> {
        let file = File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io(path, e))?;
        file.set_len(0).map_err(|e| io(path, e))?;
        Ok(ReleaseLog {
            file,
            path: path.to_path_buf(),
            len: 0,
            damaged: false,
            pending: Vec::new(),
            last: HashMap::new(),
        })
    }

    /// Writes one frame's releases in one write, and returns each one's outcome: `Ok` once it
    /// is in the file. A release for a step its chain has already released is refused. A
    /// write that fails is cut back off, so the file holds whole records only; if even that
    /// fails, every later append fails too (the log cannot be trusted past it).
    pub(super) fn append(
        &mut self,
        records: &[ReleaseRecord],
        conn: &Mutex<Connection>,
    ) -> Vec<Result<(), LedgerError>> {
        if self.damaged {
            return vec![Err(self.damage()); records.len()];
        }
        let mut outcomes = Vec::with_capacity(records.len());
        let mut fresh: Vec<&ReleaseRecord> = Vec::with_capacity(records.len());
        for r in records {
            let before = fresh
                .iter()
                .filter(|f| f.run_id == r.run_id && f.chain == r.chain)
                .map(|f| Some(f.step))
                .max();
            let last = match before {
                Some(step) => Ok(step),
                None => self.last_step(r, conn),
            };
            outcomes.push(match last {
                Ok(Some(last)) if r.step <= last => Err(LedgerError::Storage {
                    path: self.path.clone(),
                    message: format!(
                        "step {} of chain {} in run {} comes after step {last} was released",
                        r.step, r.chain, r.run_id
                    ),
                }),
                Ok(_) => {
                    fresh.push(r);
                    Ok(())
                }
                Err(e) => Err(e),
            });
        }
        if fresh.is_empty() {
            return outcomes;
        }
        let bytes = encode(&fresh);
        if let Err(e) = self.file.write_all(&bytes) {
            let failed = match self.cut_to(self.len) {
                Ok(()) => io(&self.path, e),
                Err(cut) => {
                    self.damaged = true;
                    io(&self.path, cut)
                }
            };
            return outcomes
                .into_iter()
                .map(|o| o.and(Err(failed.clone())))
                .collect();
        }
        self.len += bytes.len() as u64;
        for r in fresh {
            self.note_last(r, Some(r.step));
            self.pending.push(r.clone());
        }
        outcomes
    }

    /// The last step released for `r`'s chain, read from SQLite the first time.
    fn last_step(
        &mut self,
        r: &ReleaseRecord,
        conn: &Mutex<Connection>,
    ) -> Result<Option<u64>, LedgerError> {
        if let Some(last) = self.last.get(&r.run_id).and_then(|run| run.get(&r.chain)) {
            return Ok(*last);
        }
        let conn = conn.lock().expect("ledger lock");
        let last: Option<i64> = conn
            .query_row(
                "SELECT MAX(step) FROM releases WHERE run_id = ?1 AND chain = ?2",
                rusqlite::params![r.run_id, r.chain],
                |row| row.get(0),
            )
            .map_err(|e| super::storage(&self.path, e))?;
        let last = last.map(|s| s as u64);
        self.note_last(r, last);
        Ok(last)
    }

    /// Notes `last` as the last step of `r`'s chain, copying the run id only for a new run
    /// (this runs for every release).
    fn note_last(&mut self, r: &ReleaseRecord, last: Option<u64>) {
        match self.last.get_mut(&r.run_id) {
            Some(chains) => {
                chains.insert(r.chain, last);
            }
            None => {
                self.last
                    .insert(r.run_id.clone(), HashMap::from([(r.chain, last)]));
            }
        }
    }

    /// Forgets a closed run's chains: it releases nothing more.
    pub(super) fn forget(&mut self, run_id: &str) {
        self.last.remove(run_id);
    }

    /// Cuts the file to `len` bytes, where the next write goes.
    fn cut_to(&mut self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)?;
        self.file.seek(SeekFrom::Start(len))?;
        Ok(())
    }

    fn damage(&self) -> LedgerError {
        io(
            &self.path,
            std::io::Error::other("a failed write could not be cut off the release log"),
        )
    }

    /// Whether enough releases wait for [`ReleaseLog::merge`] to be worth a transaction.
    pub(super) fn full(&self) -> bool {
        self.pending.len() >= MERGE_EVERY
    }

    /// Inserts the releases not yet merged into SQLite, in one transaction (not fsync'd on
    /// its own: the log still holds them). A release SQLite refuses (its (run, step, chain)
    /// already recorded) was answered all the same: that would be a broken invariant of the
    /// node's (one release per step), logged, and the rest are merged.
    pub(super) fn merge(&mut self, conn: &Connection) -> Result<(), LedgerError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch: Vec<Entry<'_>> = self.pending.iter().map(Entry::Release).collect();
        let outcomes = write_releases(conn, &batch).map_err(|e| super::storage(&self.path, e))?;
        for (record, outcome) in self.pending.iter().zip(outcomes) {
            if let Err(e) = outcome {
                tracing::error!(
                    run_id = record.run_id,
                    chain = record.chain,
                    step = record.step,
                    error = %e,
                    "a logged release could not be merged into the ledger"
                );
            }
        }
        self.pending.clear();
        Ok(())
    }

    /// Empties the log once an fsync'd commit covers every release merged from it.
    pub(super) fn clear(&mut self) -> Result<(), LedgerError> {
        debug_assert!(self.pending.is_empty(), "cleared with releases not merged");
        if self.damaged {
            return Err(self.damage());
        }
        self.cut_to(0).map_err(|e| io(&self.path, e))?;
        self.len = 0;
        Ok(())
    }
}

/// Reads back the log at `path` (none: nothing) and inserts its whole records into SQLite
/// in one transaction, skipping those already there; returns how many it read. Stops at the
/// first record cut short or damaged.
pub(super) fn replay(conn: &Connection, path: &Path) -> Result<usize, LedgerError> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut file) => file.read_to_end(&mut bytes).map_err(|e| io(path, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(path, e)),
    };
    let (records, whole) = decode(&bytes);
    if whole < bytes.len() {
        tracing::warn!(
            log = %path.display(),
            bytes = bytes.len() - whole,
            "the release log ends in a record cut short; it was never answered"
        );
    }
    if records.is_empty() {
        return Ok(0);
    }
    let batch: Vec<Entry<'_>> = records.iter().map(Entry::Replayed).collect();
    write_releases(conn, &batch).map_err(|e| super::storage(path, e))?;
    Ok(records.len())
}

/// Records as the log holds them: `[length u32][crc32 u32][payload]`, little-endian.
fn encode(records: &[&ReleaseRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.len() * 160);
    for r in records {
        let head = out.len();
        out.extend_from_slice(&[0; 8]);
        let mut put = |b: &[u8]| out.extend_from_slice(b);
        put(&(r.run_id.len() as u32).to_le_bytes());
        put(r.run_id.as_bytes());
        put(&r.chain.to_le_bytes());
        put(&r.step.to_le_bytes());
        put(&(r.mechanism.len() as u32).to_le_bytes());
        put(r.mechanism.as_bytes());
        put(&r.noise_multiplier.to_le_bytes());
        for v in [&r.inputs, &r.value] {
            put(&(v.len() as u32).to_le_bytes());
            v.iter().for_each(|x| put(&x.to_le_bytes()));
        }
        put(&r.noise_variance.to_le_bytes());
        match &r.masked {
            None => put(&[0]),
            Some(m) => {
                put(&[1]);
                put(&(m.steps.len() as u32).to_le_bytes());
                m.steps.iter().for_each(|s| put(&s.to_le_bytes()));
                put(&m.grid.to_le_bytes());
            }
        }
        let payload = &out[head + 8..];
        let (len, crc) = (payload.len() as u32, crc32fast::hash(payload));
        out[head..head + 4].copy_from_slice(&len.to_le_bytes());
        out[head + 4..head + 8].copy_from_slice(&crc.to_le_bytes());
    }
    out
}

/// The whole records at the start of `bytes`, and how many bytes they take.
fn decode(bytes: &[u8]) -> (Vec<ReleaseRecord>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        let Some(payload) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32fast::hash(payload) != crc {
            break;
        }
        match Reader(payload).record() {
            Some(r) => records.push(r),
            None => break,
        }
        at += 8 + len;
    }
    (records, at)
}

/// A record's payload, read field by field; `None` where it does not parse to its end.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn f64(&mut self) -> Option<f64> {
        self.u64().map(f64::from_bits)
    }
    fn text(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    fn f64s(&mut self) -> Option<Vec<f64>> {
        let n = self.u32()? as usize;
        (0..n).map(|_| self.f64()).collect()
    }
    fn record(mut self) -> Option<ReleaseRecord> {
        let record = ReleaseRecord {
            run_id: self.text()?,
            chain: self.u32()?,
            step: self.u64()?,
            mechanism: self.text()?,
            noise_multiplier: self.f64()?,
            inputs: self.f64s()?,
            value: self.f64s()?,
            noise_variance: self.f64()?,
            masked: match self.take(1)? {
                [0] => None,
                [1] => {
                    let n = self.u32()? as usize;
                    let steps = (0..n)
                        .map(|_| Some(u128::from_le_bytes(self.take(16)?.try_into().ok()?)))
                        .collect::<Option<Vec<u128>>>()?;
                    Some(Masked {
                        steps,
                        grid: self.f64()?,
                    })
                }
                _ => return None,
            },
        };
        self.0.is_empty().then_some(record)
    }
}

#[cfg(test)]
mod tests;
