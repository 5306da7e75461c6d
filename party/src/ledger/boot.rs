//! Releases are committed without an fsync of their own; what makes that safe.
//!
//! A release is written to the release log (`log.rs`), and later merged into SQLite under
//! WAL with `synchronous = NORMAL`: in the OS's page cache, not fsync'd. It survives the
//! party's process dying (kill -9, a panic, an OOM kill), since the kernel still writes the
//! page out, and may be lost only if the machine itself stops (power loss, kernel crash). Reservations, closes and this marker
//! stay `synchronous = FULL`, and an fsync of the WAL covers every commit written before it.
//!
//! So a release lost to a machine crash belongs to a run whose whole plan was reserved,
//! fsync'd, before its first release. The ledger records the machine's boot id
//! (`/proc/sys/kernel/random/boot_id`) when it starts and marks the stop clean when it is
//! dropped (after an fsync). Opened on another boot after a stop that was not clean, every
//! run still open is closed at its whole plan ([`ClosedBy::Restart`]) and refuses its steps:
//! a retried step can never be answered again with fresh noise, and the charge covers every
//! release the run could have made, recorded or not. Where the boot id cannot be read, every
//! release is fsync'd as before.
use rusqlite::{Connection, OptionalExtension, params};

use super::ClosedBy;
use super::write::{Entry, write_entry};

/// The file the kernel gives a new random id at every boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// This machine's boot id, if the kernel gives one.
pub(super) fn current() -> Option<String> {
    let id = std::fs::read_to_string(BOOT_ID).ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS boot (
    only INTEGER PRIMARY KEY CHECK (only = 0),
    boot_id TEXT NOT NULL,
    clean INTEGER NOT NULL
);
";

/// Under `synchronous = FULL`: closes at their whole plan the runs a machine crash may have
/// cost releases, then records `boot` as this ledger's, not yet stopped cleanly. Returns the
/// runs closed.
pub(super) fn start(conn: &Connection, boot: &str) -> rusqlite::Result<Vec<String>> {
    let last: Option<(String, bool)> = conn
        .query_row("SELECT boot_id, clean FROM boot", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    // No marker: the ledger was written by a version that fsync'd every release.
    let unclean = last.is_some_and(|(id, clean)| id != boot && !clean);
    let mut sealed = Vec::new();
    if unclean {
        let mut stmt = conn.prepare("SELECT run_id FROM runs WHERE closed = 0 ORDER BY rowid")?;
        sealed = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        // Each close is committed before the marker: stopped half-way, the next start
        // closes the rest.
        for run_id in &sealed {
            let by = ClosedBy::Restart;
            write_entry(conn, &Entry::Close { run_id, by })?;
        }
    }
    conn.execute(
        "INSERT INTO boot (only, boot_id, clean) VALUES (0, ?1, 0)
         ON CONFLICT (only) DO UPDATE SET boot_id = ?1, clean = 0",
        params![boot],
    )?;
    Ok(sealed)
}

/// Under `synchronous = FULL`, so the WAL and every release in it are on disk: the stop was
/// clean.
pub(super) fn stop(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute("UPDATE boot SET clean = 1", []).map(|_| ())
}
