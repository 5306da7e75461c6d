use super::super::tests::penalty_terms;
use super::super::{ClosedBy, Ledger};
use super::*;

fn record(run_id: &str, chain: u32, step: u64) -> ReleaseRecord {
    ReleaseRecord {
        run_id: run_id.into(),
        chain,
        step,
        mechanism: "gaussian".into(),
        noise_multiplier: 2.5,
        inputs: vec![0.5, -1.25, f64::MIN_POSITIVE],
        value: vec![f64::from(chain) - step as f64],
        noise_variance: 6.25,
        masked: None,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// A relaxed ledger (a known boot) at `path` with run `r` open.
fn relaxed(path: &Path, rt: &tokio::runtime::Runtime) -> Ledger {
    let (ledger, _) = Ledger::open_at_boot(path, Some("boot-a".into())).unwrap();
    rt.block_on(ledger.open_run("r", &penalty_terms(2, 1000)))
        .unwrap();
    ledger
}

fn rows_in_sqlite(ledger: &Ledger) -> i64 {
    let conn = ledger.conn.lock().unwrap();
    conn.query_row("SELECT COUNT(*) FROM releases", [], |r| r.get(0))
        .unwrap()
}

fn log_bytes(path: &Path) -> u64 {
    std::fs::metadata(path_beside(path)).unwrap().len()
}

/// Drops a ledger as a killed process leaves it: no merge, no clean stop.
fn killed(mut ledger: Ledger) {
    ledger.relaxed = false;
}

#[test]
fn records_read_back_as_written() {
    let mut masked = record("run-é", 7, u64::MAX);
    masked.value.clear();
    masked.inputs.clear();
    masked.masked = Some(Masked {
        steps: vec![0, u128::MAX, 12345],
        grid: 0.125,
    });
    let records = [record("r", 0, 0), masked, record("", u32::MAX, 3)];
    let bytes = encode(&records.iter().collect::<Vec<_>>());
    let (back, whole) = decode(&bytes);
    assert_eq!(back, records);
    assert_eq!(whole, bytes.len());
}

/// Every way of cutting the log short, and a flipped bit anywhere, ends the reading at the
/// last whole, undamaged record before it.
#[test]
fn a_record_cut_short_or_damaged_ends_the_reading() {
    let records = [record("r", 0, 0), record("r", 1, 0), record("r", 0, 1)];
    let bytes = encode(&records.iter().collect::<Vec<_>>());
    let ends: Vec<usize> = (1..=3)
        .map(|k| encode(&records[..k].iter().collect::<Vec<_>>()).len())
        .collect();
    for cut in 0..bytes.len() {
        let (back, whole) = decode(&bytes[..cut]);
        let expected = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(back.len(), expected, "cut at {cut}");
        assert_eq!(&back[..], &records[..expected]);
        assert_eq!(whole, if expected == 0 { 0 } else { ends[expected - 1] });
    }
    for at in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        let (back, _) = decode(&damaged);
        let hit = ends.iter().filter(|&&e| e <= at).count();
        assert_eq!(&back[..], &records[..hit], "bit flipped at {at}");
    }
}

/// A release is logged, not committed to SQLite, before its answer; a killed process keeps
/// it (the log is in the kernel's cache), and the next start reads it into SQLite, where
/// the run's chain resumes after it, and empties the log.
#[test]
fn a_killed_party_restarts_with_every_logged_release() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let rt = runtime();
    let ledger = relaxed(&path, &rt);
    let frame = [record("r", 0, 0), record("r", 1, 0)];
    assert!(
        rt.block_on(ledger.record_releases(&frame))
            .iter()
            .all(Result::is_ok)
    );
    let one = [record("r", 0, 1)];
    assert!(rt.block_on(ledger.record_releases(&one))[0].is_ok());
    assert_eq!(rows_in_sqlite(&ledger), 0, "logged, not yet merged");
    assert!(log_bytes(&path) > 0);
    killed(ledger);
    let (ledger, open) = Ledger::open_at_boot(&path, Some("boot-a".into())).unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].released, 3);
    let last: Vec<u64> = open[0]
        .last
        .iter()
        .map(|l| l.as_ref().unwrap().step)
        .collect();
    assert_eq!(last, [1, 0]);
    assert_eq!(open[0].last[0].as_ref().unwrap(), &one[0]);
    assert_eq!(rows_in_sqlite(&ledger), 3);
    assert_eq!(log_bytes(&path), 0, "emptied once read back");
}

/// A record cut short at the log's end (a write the process died in, never answered) is
/// left out and cut off, and later records are appended after the whole ones.
#[test]
fn a_torn_tail_is_left_out_and_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let rt = runtime();
    let ledger = relaxed(&path, &rt);
    assert!(rt.block_on(ledger.record_releases(&[record("r", 0, 0)]))[0].is_ok());
    killed(ledger);
    let torn = encode(&[&record("r", 0, 1)]);
    let mut log = File::options()
        .append(true)
        .open(path_beside(&path))
        .unwrap();
    log.write_all(&torn[..torn.len() - 3]).unwrap();
    drop(log);
    let (ledger, open) = Ledger::open_at_boot(&path, Some("boot-a".into())).unwrap();
    assert_eq!(open[0].released, 1, "the torn release is not read");
    assert!(rt.block_on(ledger.record_releases(&[record("r", 0, 1)]))[0].is_ok());
    killed(ledger);
    let (_, open) = Ledger::open_at_boot(&path, Some("boot-a".into())).unwrap();
    assert_eq!(open[0].released, 2);
}

/// The ledger's own check that a step is released once holds on the log as it does on
/// SQLite's key: within a frame, across frames, and after a restart.
#[test]
fn a_step_released_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let rt = runtime();
    let ledger = relaxed(&path, &rt);
    let frame = [record("r", 0, 0), record("r", 0, 0), record("r", 1, 0)];
    let ok: Vec<bool> = rt
        .block_on(ledger.record_releases(&frame))
        .iter()
        .map(Result::is_ok)
        .collect();
    assert_eq!(ok, [true, false, true]);
    assert!(rt.block_on(ledger.record_releases(&[record("r", 1, 0)]))[0].is_err());
    drop(ledger);
    let (ledger, _) = Ledger::open_at_boot(&path, Some("boot-a".into())).unwrap();
    assert!(rt.block_on(ledger.record_releases(&[record("r", 0, 0)]))[0].is_err());
    assert!(rt.block_on(ledger.record_releases(&[record("r", 0, 1)]))[0].is_ok());
    drop(ledger);
    let (ledger, _) = Ledger::open_at_boot(&path, Some("boot-a".into())).unwrap();
    assert_eq!(rows_in_sqlite(&ledger), 3);
}

/// The log is merged into SQLite every [`MERGE_EVERY`] releases and before a close, which
/// charges every release and empties the log; `party status` sees logged releases too.
#[test]
fn merges_come_in_batches_and_before_a_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let rt = runtime();
    let ledger = relaxed(&path, &rt);
    let steps = MERGE_EVERY as u64 + 10;
    for step in 0..steps {
        assert!(rt.block_on(ledger.record_releases(&[record("r", 0, step)]))[0].is_ok());
    }
    assert_eq!(rows_in_sqlite(&ledger), MERGE_EVERY as i64);
    let (_, open) = Ledger::snapshot_at_boot(&path, Some("boot-a".into())).unwrap();
    assert_eq!(open[0].released, steps, "the snapshot reads the log too");
    rt.block_on(ledger.close_run("r", ClosedBy::CloseRun))
        .unwrap();
    assert_eq!(rows_in_sqlite(&ledger), steps as i64);
    assert_eq!(log_bytes(&path), 0);
    let (_, released) = ledger.released("r").unwrap().unwrap();
    assert_eq!(released, vec![(2.5, steps)]);
}
