//! Reading the ledger back: the open runs at start, the closed runs' aggregate charge, and
//! what a closed run released and was answered. Every read is a fixed number of queries,
//! whatever the number of runs.
use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::{
    Closed, ClosedBy, ClosedCharge, ClosedRuns, Masked, PUBLIC_MECHANISM, ReleaseRecord, RunRecord,
    RunReleases, RunTerms, blob_to_f64s, blob_to_u128s,
};

fn terms_from_json(column: usize, text: &str) -> rusqlite::Result<RunTerms> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// Open runs with their release counts and each chain's last release: two queries in all, not
/// one per run or chain (a ledger once held millions of chains and took minutes to start).
pub(super) fn read_open_runs(conn: &Connection) -> rusqlite::Result<Vec<RunRecord>> {
    let mut stmt = conn.prepare(
        "SELECT run_id, terms, aggregation_secret FROM runs WHERE closed = 0 ORDER BY rowid",
    )?;
    let mut runs = Vec::new();
    let mut index = HashMap::new();
    let heads = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<Vec<u8>>>(2)?,
        ))
    })?;
    for head in heads {
        let (run_id, terms, secret) = head?;
        let terms = terms_from_json(1, &terms)?;
        index.insert(run_id.clone(), runs.len());
        runs.push(RunRecord {
            run_id,
            last: vec![None; terms.chains as usize],
            terms,
            released: 0,
            public: 0,
            // A secret of another length is no secret: the run's steps are then refused.
            aggregation_secret: secret.and_then(|s| s.try_into().ok()),
        });
    }
    // SQLite takes the bare columns of a group from the row holding its MAX(step).
    let mut stmt = conn.prepare(
        "SELECT run_id, chain, MAX(step), SUM(mechanism <> ?1), mechanism, noise_multiplier,
                inputs, value, noise_variance, SUM(mechanism = ?1), masked, grid
         FROM releases WHERE run_id IN (SELECT run_id FROM runs WHERE closed = 0)
         GROUP BY run_id, chain",
    )?;
    let mut rows = stmt.query([PUBLIC_MECHANISM])?;
    while let Some(r) = rows.next()? {
        let run_id: String = r.get(0)?;
        let chain: u32 = r.get(1)?;
        let Some(run) = index.get(&run_id).map(|&i| &mut runs[i]) else {
            continue;
        };
        run.released += r.get::<_, i64>(3)? as u64;
        run.public += r.get::<_, i64>(9)? as u64;
        let record = ReleaseRecord {
            run_id,
            chain,
            step: r.get::<_, i64>(2)? as u64,
            mechanism: r.get(4)?,
            noise_multiplier: r.get(5)?,
            inputs: blob_to_f64s(&r.get::<_, Vec<u8>>(6)?),
            value: blob_to_f64s(&r.get::<_, Vec<u8>>(7)?),
            noise_variance: r.get(8)?,
            masked: match (
                r.get::<_, Option<Vec<u8>>>(10)?,
                r.get::<_, Option<f64>>(11)?,
            ) {
                (Some(steps), Some(grid)) => Some(Masked {
                    steps: blob_to_u128s(&steps),
                    grid,
                }),
                _ => None,
            },
        };
        // A release on a chain beyond the run's terms is still charged (counted above).
        if let Some(slot) = run.last.get_mut(chain as usize) {
            *slot = Some(record);
        }
    }
    Ok(runs)
}

/// Closed runs: ids and reasons, and their charge: their charged releases (not the public
/// ones) summed per (variant, noise multiplier) in one GROUP BY (a release's multiplier is
/// its run's: the release path copies it), and the whole plan of each run closed at it.
pub(super) fn read_closed_runs(conn: &Connection) -> rusqlite::Result<ClosedRuns> {
    let mut stmt = conn
        .prepare("SELECT run_id, closed_idle_seconds, closed_at_plan FROM runs WHERE closed = 1")?;
    let runs = stmt
        .query_map([], |r| {
            let by = match (r.get::<_, Option<i64>>(1)?, r.get::<_, Option<i64>>(2)?) {
                (_, Some(1)) => ClosedBy::Restart,
                (None, _) => ClosedBy::CloseRun,
                (Some(s), _) => ClosedBy::Lease {
                    idle_seconds: s as u64,
                },
            };
            Ok((r.get(0)?, by))
        })?
        .collect::<Result<_, _>>()?;
    let mut stmt = conn.prepare(
        "SELECT json_extract(runs.terms, '$.variant'), releases.noise_multiplier,
                json_extract(runs.terms, '$.batch_size'), json_extract(runs.terms, '$.population'),
                COUNT(*)
         FROM releases JOIN runs ON runs.run_id = releases.run_id
         WHERE runs.closed = 1 AND runs.closed_at_plan IS NOT 1 AND releases.mechanism <> ?1
         GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4",
    )?;
    let mut charges: Vec<ClosedCharge> = stmt
        .query_map([PUBLIC_MECHANISM], |r| {
            Ok(ClosedCharge {
                variant: r.get(0)?,
                noise_multiplier: r.get(1)?,
                batch_size: r.get::<_, Option<i64>>(2)?.map(|b| b as u64),
                population: r.get::<_, Option<i64>>(3)?.map(|n| n as u64),
                releases: r.get::<_, i64>(4)? as u64,
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut stmt =
        conn.prepare("SELECT terms FROM runs WHERE closed = 1 AND closed_at_plan = 1")?;
    for terms in stmt.query_map([], |r| r.get::<_, String>(0))? {
        let terms = terms_from_json(0, &terms?)?;
        let (releases, noise_multiplier) = terms.reservation();
        charges.push(ClosedCharge {
            variant: terms.variant,
            noise_multiplier,
            batch_size: terms.batch_size,
            population: terms.population,
            releases,
        });
    }
    Ok(ClosedRuns { runs, charges })
}

/// The answer recorded for the closed run `run_id`, if any.
pub(super) fn answer(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<Closed>> {
    conn.query_row(
        "SELECT answer_releases, answer_run_epsilon, answer_epsilon_committed FROM runs
         WHERE run_id = ?1 AND closed = 1 AND answer_releases IS NOT NULL",
        params![run_id],
        |r| {
            Ok(Closed {
                releases: r.get::<_, i64>(0)? as u64,
                run_epsilon: r.get(1)?,
                epsilon_committed: r.get(2)?,
            })
        },
    )
    .optional()
}

/// A closed run's terms and its charged (not public) releases per noise multiplier, ascending;
/// for a run closed at its whole plan, the plan.
pub(super) fn released(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<RunReleases>> {
    let Some((terms, at_plan)) = conn
        .query_row(
            "SELECT terms, closed_at_plan IS 1 FROM runs WHERE run_id = ?1 AND closed = 1",
            params![run_id],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, bool>(1)?)),
        )
        .optional()?
    else {
        return Ok(None);
    };
    let terms = terms_from_json(0, &terms)?;
    if at_plan {
        let (releases, multiplier) = terms.reservation();
        return Ok(Some((terms, vec![(multiplier, releases)])));
    }
    let mut stmt = conn.prepare(
        "SELECT noise_multiplier, COUNT(*) FROM releases
         WHERE run_id = ?1 AND mechanism <> ?2 GROUP BY 1 ORDER BY 1",
    )?;
    let counts = stmt
        .query_map(params![run_id, PUBLIC_MECHANISM], |r| {
            Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))
        })?
        .collect::<Result<_, _>>()?;
    Ok(Some((terms, counts)))
}
