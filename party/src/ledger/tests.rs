use super::*;
use rusqlite::params;

fn in_use(result: Result<(Ledger, Vec<RunRecord>), LedgerError>) -> String {
    match result {
        Err(e @ LedgerError::InUse { .. }) => e.to_string(),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a second open of an owned ledger succeeded"),
    }
}

/// `flock` conflicts between open file descriptions, so a second open in the same process
/// is refused as another process's would be; dropping the first frees the ledger.
#[test]
fn a_ledger_has_one_owner_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let first = Ledger::open(&path).unwrap();
    let said = in_use(Ledger::open(&path));
    assert_eq!(
        said,
        format!(
            "ledger {} is in use by another process; a ledger belongs to one party at a time",
            path.display()
        )
    );
    drop(first);
    let again = Ledger::open(&path).unwrap();
    // In-memory ledgers own no file.
    let _a = Ledger::in_memory().unwrap();
    let _b = Ledger::in_memory().unwrap();
    drop(again);
}

/// The lock is on the file, not its name: a symlink, a hard link or a path through
/// another directory reaches the same lock.
#[test]
fn the_lock_holds_whatever_path_reaches_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let _owner = Ledger::open(&path).unwrap();
    let symlink = dir.path().join("symlink.sqlite");
    std::os::unix::fs::symlink(&path, &symlink).unwrap();
    let hard = dir.path().join("hard.sqlite");
    std::fs::hard_link(&path, &hard).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let dotted = dir.path().join("sub/../ledger.sqlite");
    for other in [symlink, hard, dotted] {
        let said = in_use(Ledger::open(&other));
        assert!(said.contains(&other.display().to_string()), "{said}");
    }
}

/// A ledger written before runs recorded why they were closed gains the column; its
/// closed runs read as closed by CloseRun and keep their charge.
#[test]
fn a_ledger_of_the_first_schema_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let terms = RunTerms {
        variant: "full-penalty".into(),
        chains: 2,
        steps_per_chain: 5,
        planned_releases: 10,
        clip: 2.0,
        tau: 0.5,
        noise_multiplier: 22.5,
        batch_size: None,
        population: None,
        barker_variance: None,
        hmc: None,
        aggregation: None,
    };
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (
                run_id TEXT PRIMARY KEY,
                opened_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                terms TEXT NOT NULL,
                closed INTEGER NOT NULL DEFAULT 0
            );",
        )
        .unwrap();
        // The first schema's releases: a rowid table keyed by (run, chain, step).
        conn.execute_batch(
            "CREATE TABLE releases (
                run_id TEXT NOT NULL REFERENCES runs(run_id),
                chain INTEGER NOT NULL,
                step INTEGER NOT NULL,
                mechanism TEXT NOT NULL,
                noise_multiplier REAL NOT NULL,
                inputs BLOB NOT NULL,
                value BLOB NOT NULL,
                noise_variance REAL NOT NULL,
                PRIMARY KEY (run_id, chain, step)
            );",
        )
        .unwrap();
        for (run_id, closed) in [("old", 1), ("live", 0)] {
            // The first schema's columns.
            conn.execute(
                "INSERT INTO runs (run_id, terms) VALUES (?1, ?2)",
                params![run_id, serde_json::to_string(&terms).unwrap()],
            )
            .unwrap();
            // The first schema's columns: nothing of secure aggregation.
            for step in 0..2u8 {
                conn.execute(
                    "INSERT INTO releases (run_id, chain, step, mechanism, noise_multiplier, inputs, value, noise_variance)
                     VALUES (?1, 1, ?2, 'gaussian', ?3, zeroblob(32), ?4, 1.0)",
                    params![run_id, step, terms.noise_multiplier, f64::from(step).to_le_bytes().to_vec()],
                )
                .unwrap();
            }
            conn.execute(
                "UPDATE runs SET closed = ?2 WHERE run_id = ?1",
                params![run_id, closed],
            )
            .unwrap();
        }
    }
    let (ledger, open) = Ledger::open(&path).unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].run_id, "live");
    assert_eq!(open[0].released, 2);
    assert!(open[0].last[0].is_none());
    assert_eq!(open[0].last[1].as_ref().unwrap().step, 1);
    let closed = ledger.closed_runs().unwrap();
    assert_eq!(
        closed.runs,
        HashMap::from([("old".into(), ClosedBy::CloseRun)])
    );
    assert_eq!(
        closed.charges,
        vec![ClosedCharge {
            variant: "full-penalty".into(),
            noise_multiplier: 22.5,
            batch_size: None,
            population: None,
            releases: 2,
        }]
    );
    // The new column is written from now on.
    let by = ClosedBy::Lease { idle_seconds: 600 };
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(ledger.close_run("live", by))
        .unwrap();
    let closed = ledger.closed_runs().unwrap();
    assert_eq!(closed.runs["live"], by);
    assert_eq!(closed.charges[0].releases, 4);
}

/// A full-penalty run's terms: `chains` × `steps` releases at multiplier 1.
pub(super) fn penalty_terms(chains: u32, steps: u64) -> RunTerms {
    serde_json::from_value(serde_json::json!({
        "variant": "full-penalty", "chains": chains, "steps_per_chain": steps,
        "planned_releases": u64::from(chains) * steps,
        "clip": 1.0, "tau": 0.1, "noise_multiplier": 1.0
    }))
    .unwrap()
}

fn release(run_id: &str, chain: u32, step: u64) -> ReleaseRecord {
    ReleaseRecord {
        run_id: run_id.into(),
        chain,
        step,
        mechanism: "gaussian".into(),
        noise_multiplier: 1.0,
        inputs: vec![0.5; 4],
        value: vec![f64::from(chain) + step as f64],
        noise_variance: 1.0,
        masked: None,
    }
}

/// In-memory ledgers in one process are separate (simulated parties each hold one): the
/// same run and release in two of them are both recorded, and one holds nothing of the other.
#[test]
fn in_memory_ledgers_are_separate() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (a, b) = (Ledger::in_memory().unwrap(), Ledger::in_memory().unwrap());
    for ledger in [&a, &b] {
        runtime
            .block_on(ledger.open_run("r", &penalty_terms(1, 2)))
            .unwrap();
        let recorded = runtime.block_on(ledger.record_releases(&[release("r", 0, 0)]));
        assert!(recorded[0].is_ok(), "{recorded:?}");
    }
    runtime
        .block_on(a.record_releases(&[release("r", 0, 1)]))
        .remove(0)
        .unwrap();
    let count = |l: &Ledger| {
        runtime
            .block_on(l.close_run("r", ClosedBy::CloseRun))
            .unwrap();
        l.released("r").unwrap().unwrap().1
    };
    assert_eq!((count(&a), count(&b)), (vec![(1.0, 2)], vec![(1.0, 1)]));
}

/// 400 releases from 8 threads at once on a durable ledger are all answered and all on disk
/// after a reopen, and a release the ledger refuses (a step already recorded) fails alone:
/// with the boot known (the release log) and unknown (group commit, fsync'd).
#[test]
fn concurrent_releases_commit_together_and_fail_alone() {
    for boot in [Some("boot-a"), None] {
        concurrent_releases(boot.map(str::to_string));
    }
}

fn concurrent_releases(boot: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .build()
        .unwrap();
    let (ledger, _) = Ledger::open_at_boot(&path, boot).unwrap();
    let ledger = std::sync::Arc::new(ledger);
    let terms = penalty_terms(8, 50);
    runtime.block_on(ledger.open_run("r", &terms)).unwrap();
    let outcomes: Vec<Result<(), LedgerError>> = runtime.block_on(async {
        let tasks: Vec<_> = (0..8u32)
            .map(|chain| {
                let ledger = std::sync::Arc::clone(&ledger);
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    // Odd chains record their steps two at a time, as frames do.
                    let each = if chain % 2 == 1 { 2 } else { 1 };
                    for first in (0..50).step_by(each) {
                        let records: Vec<_> = (first..first + each as u64)
                            .map(|step| release("r", chain, step))
                            .collect();
                        out.extend(ledger.record_releases(&records).await);
                    }
                    // A duplicate of a recorded step, refused by the key.
                    out.extend(ledger.record_releases(&[release("r", chain, 0)]).await);
                    out
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    let (ok, refused) = outcomes.iter().partition::<Vec<_>, _>(|r| r.is_ok());
    assert_eq!((ok.len(), refused.len()), (400, 8));
    drop(ledger);
    let conn = Connection::open(&path).unwrap();
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM releases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 400);
}

/// An in-memory ledger's schema with one open run, `r`, for [`write_releases`] alone.
fn with_run_r() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    migrate(&conn).unwrap();
    conn.execute("INSERT INTO runs (run_id, terms) VALUES ('r', '{}')", [])
        .unwrap();
    conn
}

fn entries(records: &[ReleaseRecord]) -> Vec<Entry<'_>> {
    records.iter().map(Entry::Release).collect()
}

/// A batch of releases with one refused: the others are committed in the same transaction.
#[test]
fn a_refused_release_in_a_batch_fails_alone() {
    let conn = with_run_r();
    let records: Vec<_> = [(0, 0), (0, 1), (0, 0), (1, 0)]
        .iter()
        .map(|&(chain, step)| release("r", chain, step))
        .collect();
    let outcomes = write_releases(&conn, &entries(&records)).unwrap();
    let ok: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
    assert_eq!(ok, [true, true, false, true]);
    assert!(conn.is_autocommit(), "the transaction is over");
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM releases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 3);
}

/// A batch that fills the database: SQLite then rolls the whole transaction back (it may
/// instead back out the one statement), and every release reported committed is in the
/// table and no other is. Carrying on after the rollback would autocommit the rest one by
/// one and then report them all failed.
#[test]
fn a_full_database_never_reports_an_unrecorded_release() {
    let conn = with_run_r();
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    conn.pragma_update(None, "max_page_count", pages + 1)
        .unwrap();
    let records: Vec<_> = (0..400).map(|step| release("r", 0, step)).collect();
    let committed = match write_releases(&conn, &entries(&records)) {
        Ok(outcomes) => {
            assert!(outcomes.iter().any(Result::is_err), "the database filled");
            outcomes.iter().filter(|o| o.is_ok()).count()
        }
        Err(_) => 0,
    };
    assert!(conn.is_autocommit(), "the transaction is over");
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM releases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows as usize, committed);
}

impl Ledger {
    /// Drops the ledger as a machine crash would: without its clean stop.
    fn crash(mut self) {
        self.relaxed = false;
    }

    fn synchronous(&self) -> i64 {
        let conn = self.conn.lock().unwrap();
        conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    }
}

/// A run of 10 planned releases with 3 made, on boot `boot`, then stopped by `stop`.
fn three_of_ten(path: &Path, boot: Option<&str>, stop: fn(Ledger)) {
    let (ledger, _) = Ledger::open_at_boot(path, boot.map(str::to_string)).unwrap();
    let terms = penalty_terms(1, 10);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(ledger.open_run("r", &terms)).unwrap();
    let records: Vec<_> = (0..3).map(|step| release("r", 0, step)).collect();
    let outcomes = runtime.block_on(ledger.record_releases(&records));
    assert!(outcomes.iter().all(Result::is_ok));
    stop(ledger);
}

/// Opened on another boot after a stop that was not clean (the machine crashed), a run left
/// open is closed and charged its whole plan: releases not yet fsync'd may be missing, and
/// none of its steps is answered again.
#[test]
fn after_a_machine_crash_open_runs_are_charged_their_whole_plan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    three_of_ten(&path, Some("boot-a"), Ledger::crash);
    let (ledger, open) = Ledger::open_at_boot(&path, Some("boot-b".into())).unwrap();
    assert!(open.is_empty(), "the run is closed");
    let closed = ledger.closed_runs().unwrap();
    assert_eq!(
        closed.runs,
        HashMap::from([("r".into(), ClosedBy::Restart)])
    );
    assert_eq!(
        closed.charges,
        vec![ClosedCharge {
            variant: "full-penalty".into(),
            noise_multiplier: 1.0,
            batch_size: None,
            population: None,
            releases: 10,
        }]
    );
    let (_, released) = ledger.released("r").unwrap().unwrap();
    assert_eq!(released, vec![(1.0, 10)]);
    // Closed once: a later clean stop and restart leave it so.
    drop(ledger);
    let (ledger, open) = Ledger::open_at_boot(&path, Some("boot-c".into())).unwrap();
    assert!(open.is_empty());
    assert_eq!(ledger.closed_runs().unwrap().charges[0].releases, 10);
}

/// `party status` reports a ledger as the next `party serve` will hold it: after a machine
/// crash, its snapshot shows the open run closed at its plan, while the file itself is left
/// for the serving party to close.
#[test]
fn a_snapshot_after_a_machine_crash_shows_the_runs_closed_at_their_plan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    three_of_ten(&path, Some("boot-a"), Ledger::crash);
    let (snapshot, open) = Ledger::snapshot_at_boot(&path, Some("boot-b".into())).unwrap();
    assert!(open.is_empty(), "the snapshot's run is closed");
    assert_eq!(snapshot.closed_runs().unwrap().charges[0].releases, 10);
    // On the boot that wrote it, or with the boot unknown, the run is still open.
    for boot in [Some("boot-a".to_string()), None] {
        let (_, open) = Ledger::snapshot_at_boot(&path, boot).unwrap();
        assert_eq!(open.len(), 1);
    }
    let (_, open) = Ledger::open_at_boot(&path, Some("boot-a".into())).unwrap();
    assert_eq!(
        (open.len(), open[0].released),
        (1, 3),
        "the file is unchanged"
    );
}

/// The party's process dying (kill -9) loses no release that was committed: the kernel
/// still holds it. On the same boot the run stays open with its releases, as after a clean
/// stop on any boot, and as on a ledger of a version that fsync'd every release.
#[test]
fn a_process_crash_or_a_clean_stop_keeps_runs_open() {
    for (first, stop, second) in [
        (Some("boot-a"), Ledger::crash as fn(Ledger), Some("boot-a")),
        (Some("boot-a"), drop::<Ledger>, Some("boot-b")),
        (None, Ledger::crash, Some("boot-b")),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        three_of_ten(&path, first, stop);
        let (ledger, open) = Ledger::open_at_boot(&path, second.map(str::to_string)).unwrap();
        assert_eq!(open.len(), 1, "{first:?} then {second:?}");
        assert_eq!(open[0].released, 3);
        assert_eq!(open[0].last[0].as_ref().unwrap().step, 2);
        assert!(ledger.closed_runs().unwrap().runs.is_empty());
    }
}

/// Releases skip their fsync only where the boot id is known; reservations never do.
#[test]
fn releases_are_fsynced_where_the_boot_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let (known, _) = Ledger::open_at_boot(&dir.path().join("a.sqlite"), Some("b".into())).unwrap();
    let (unknown, _) = Ledger::open_at_boot(&dir.path().join("b.sqlite"), None).unwrap();
    // 1 = NORMAL, 2 = FULL.
    assert_eq!((known.synchronous(), unknown.synchronous()), (1, 2));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let terms = penalty_terms(1, 1);
    let full = |conn: &Connection| -> rusqlite::Result<()> {
        let level: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
        assert_eq!(level, 2, "a reservation is fsync'd");
        Ok(())
    };
    known.fsynced(&known.conn.lock().unwrap(), full).unwrap();
    runtime.block_on(known.open_run("r", &terms)).unwrap();
    assert_eq!(known.synchronous(), 1, "back to NORMAL for releases");
    assert!(Ledger::in_memory().is_ok_and(|l| !l.relaxed));
}
