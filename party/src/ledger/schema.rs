//! The ledger's tables, and the migration of a ledger written by an earlier version.
use rusqlite::{Connection, params};

/// The releases are one B-tree keyed by (run, step, chain), without a rowid: a frame's
/// releases (every chain's same step) then land side by side at its end, so a commit writes
/// about one page to the WAL. Keyed by chain first, beside a rowid table, a frame of 4 chains
/// dirtied 5 pages, and the party's frame took 135 µs instead of 94 (issue 25). A ledger made
/// before keeps its table: the same columns and key, in another order.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    opened_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    terms TEXT NOT NULL,
    closed INTEGER NOT NULL DEFAULT 0,
    closed_idle_seconds INTEGER,
    answer_releases INTEGER,
    answer_run_epsilon REAL,
    answer_epsilon_committed REAL
);
CREATE TABLE IF NOT EXISTS releases (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    chain INTEGER NOT NULL,
    step INTEGER NOT NULL,
    mechanism TEXT NOT NULL,
    noise_multiplier REAL NOT NULL,
    inputs BLOB NOT NULL,
    value BLOB NOT NULL,
    noise_variance REAL NOT NULL,
    PRIMARY KEY (run_id, step, chain)
) WITHOUT ROWID;
";

/// Columns added since the first schema, with their type: added to an older ledger at open.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    // NULL: open, or closed by CloseRun; otherwise closed by the lease after that many s idle.
    ("runs", "closed_idle_seconds", "INTEGER"),
    // NULL until a close's answer is recorded (`Closed`).
    ("runs", "answer_releases", "INTEGER"),
    ("runs", "answer_run_epsilon", "REAL"),
    ("runs", "answer_epsilon_committed", "REAL"),
    // NULL but for a secure-aggregation run: its session's X25519 secret.
    ("runs", "aggregation_secret", "BLOB"),
    // NULL for plain releases; a secure-aggregation answer's masked steps and grid.
    ("releases", "masked", "BLOB"),
    ("releases", "grid", "REAL"),
    // 1: closed at its whole plan, whatever it released (`ClosedBy::Restart`).
    ("runs", "closed_at_plan", "INTEGER"),
];

/// Brings a ledger written by an earlier version up to [`SCHEMA`].
pub(super) fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    for (table, column, ty) in ADDED_COLUMNS {
        let present: bool = conn.query_row(
            "SELECT COUNT(*) > 0 FROM pragma_table_info(?1) WHERE name = ?2",
            params![table, column],
            |r| r.get(0),
        )?;
        if !present {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {ty}"))?;
        }
    }
    Ok(())
}
