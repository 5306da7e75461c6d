//! The PostgreSQL data source against a real server: the rows it loads, the rows it refuses,
//! the password kept out of every message, and rows streamed rather than collected.
//!
//! The tests read `FEDMCMC_TEST_POSTGRES` (a connection string without password) and
//! `FEDMCMC_TEST_POSTGRES_PASSWORD`, which `.ci/postgres.sh` exports for a throwaway server;
//! without them each test says it is skipped and passes.
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use fedmcmc_common::data::{ColumnSpec, Columns};
use fedmcmc_common::models::ModelSpec;
use fedmcmc_common::neighbours::Neighbours;
use fedmcmc_party::config::{
    BudgetConfig, DataConfig, DataFormat, PartyConfig, PasswordSource, PostgresSource, write_secret,
};
use fedmcmc_party::store::{self, StoreError};
use rand::SeedableRng;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio_postgres::types::ToSql;

const CONNECTION: &str = "FEDMCMC_TEST_POSTGRES";
const PASSWORD: &str = "FEDMCMC_TEST_POSTGRES_PASSWORD";

/// The test server, held by one test. Tests share it (read) except the heap measurement,
/// which runs alone (write) so that no other test's allocations count in it.
struct Server<G> {
    connection: String,
    password: String,
    _turn: G,
}

static TURNS: RwLock<()> = RwLock::const_new(());

async fn shared(test: &str) -> Option<Server<RwLockReadGuard<'static, ()>>> {
    let (connection, password) = settings(test)?;
    Some(Server {
        connection,
        password,
        _turn: TURNS.read().await,
    })
}

async fn alone(test: &str) -> Option<Server<RwLockWriteGuard<'static, ()>>> {
    let (connection, password) = settings(test)?;
    Some(Server {
        connection,
        password,
        _turn: TURNS.write().await,
    })
}

/// The server's settings, or `None` after saying on stderr that the test is skipped (written
/// directly: the test harness hides what `eprintln!` prints in a passing test).
fn settings(test: &str) -> Option<(String, String)> {
    let Ok(connection) = std::env::var(CONNECTION) else {
        let _ = writeln!(
            std::io::stderr(),
            "postgres::{test}: skipped: set {CONNECTION} and {PASSWORD} (see .ci/postgres.sh)"
        );
        return None;
    };
    let password = std::env::var(PASSWORD)
        .unwrap_or_else(|_| panic!("{CONNECTION} is set, so {PASSWORD} must be too"));
    Some((connection, password))
}

impl<G> Server<G> {
    /// A client for setting tables up (on the test's runtime).
    async fn client(&self) -> tokio_postgres::Client {
        let mut config: tokio_postgres::Config = self.connection.parse().unwrap();
        config.password(&self.password);
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    /// The data source for `query`, its password read from the environment.
    fn source(&self, query: &str) -> PostgresSource {
        PostgresSource {
            connection: self.connection.clone(),
            query: query.to_string(),
            password: Some(PasswordSource::Env(PASSWORD.into())),
        }
    }

    /// Loads `query` as rows of `d` values.
    fn load(&self, query: &str, d: usize) -> Result<Columns, StoreError> {
        store::load_postgres(&self.source(query), &ColumnSpec::numbered(d))
    }

    /// Why loading `query` (2 columns) is refused; the message must not hold the password.
    fn refusal(&self, query: &str) -> String {
        let message = self.load(query, 2).unwrap_err().to_string();
        assert!(!message.contains(&self.password), "{message}");
        assert!(message.starts_with("postgres host="), "{message}");
        message
    }
}

/// Creates `table` (dropping any earlier one) holding `data` as columns x1 … xd beside an
/// `id` giving the row order; floats go over the wire in binary, so they arrive exactly.
async fn put_table(client: &tokio_postgres::Client, table: &str, data: &Columns) {
    let names = store::column_names(data.d());
    let columns: Vec<String> = names.iter().map(|n| format!("{n} float8")).collect();
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int4, {})",
            columns.join(", ")
        ))
        .await
        .unwrap();
    let arrays: Vec<String> = (2..=data.d() + 1)
        .map(|k| format!("${k}::float8[]"))
        .collect();
    let ids: Vec<i32> = (1..=data.n() as i32).collect();
    let cols: Vec<&[f64]> = (0..data.d()).map(|j| data.col(j)).collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&ids];
    params.extend(cols.iter().map(|c| c as &(dyn ToSql + Sync)));
    client
        .execute(
            &format!(
                "INSERT INTO {table} SELECT * FROM unnest($1::int4[], {})",
                arrays.join(", ")
            ),
            &params,
        )
        .await
        .unwrap();
}

/// Simulated banana rows, and some awkward values besides (tiny, subnormal, huge).
fn rows() -> Columns {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let simulated = model.simulate(&spec.true_theta(), 1_000, &mut rng);
    let awkward = Columns::from_columns(vec![
        vec![1e-300, f64::MIN_POSITIVE / 8.0, f64::MAX, 0.1],
        vec![-f64::MAX, -1e300, 5e-324, 1.0 / 3.0],
    ])
    .unwrap();
    Columns::concat(&[simulated, awkward]).unwrap()
}

fn assert_same(a: &Columns, b: &Columns) {
    assert_eq!((a.n(), a.d()), (b.n(), b.d()));
    for j in 0..a.d() {
        assert_eq!(a.col(j), b.col(j), "column {}", j + 1);
    }
}

#[tokio::test]
async fn loads_the_same_rows_as_sqlite_from_the_same_data() {
    let Some(server) = shared("loads_the_same_rows_as_sqlite_from_the_same_data").await else {
        return;
    };
    let data = rows();
    put_table(&server.client().await, "same_rows", &data).await;
    let dir = tempfile::tempdir().unwrap();
    store::write_sqlite(
        &dir.path().join("rows.sqlite"),
        "rows",
        &data,
        &store::column_names(2),
    )
    .unwrap();
    let from_sqlite = store::load(
        &DataConfig {
            format: DataFormat::Sqlite,
            path: dir.path().join("rows.sqlite"),
            table: "rows".into(),
        },
        &ColumnSpec::numbered(2),
    )
    .unwrap();
    let from_postgres = store::load(
        &DataConfig {
            format: DataFormat::Postgres(server.source("SELECT x1, x2 FROM same_rows ORDER BY id")),
            path: Default::default(),
            table: Default::default(),
        },
        &ColumnSpec::numbered(2),
    )
    .unwrap();
    assert_same(&from_postgres, &from_sqlite);
    assert_same(&from_postgres, &data);
}

#[tokio::test]
async fn float4_int2_and_int4_are_read_exactly_numeric_int8_and_text_refused() {
    let Some(server) = shared("float4_int2_and_int4_are_read_exactly").await else {
        return;
    };
    let got = server
        .load(
            "SELECT * FROM (VALUES (0.1::float4, 7::int2, (-2147483648)::int4)) AS t(x1, x2, x3)",
            3,
        )
        .unwrap();
    let want = [f64::from(0.1f32), 7.0, -2147483648.0];
    for (j, want) in want.iter().enumerate() {
        assert_eq!(got.col(j), &[*want]);
    }
    for (ty, value) in [
        ("numeric", "0.1"),
        ("int8", "9007199254740993"),
        ("text", "'1.5'"),
    ] {
        let message = server.refusal(&format!("SELECT 1::float8 AS x1, {value}::{ty} AS x2"));
        assert!(
            message.contains(&format!("column x2 is of type {ty}, expected float8")),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_bad_value_is_refused_with_its_row_and_column() {
    let Some(server) = shared("a_bad_value_is_refused_with_its_row_and_column").await else {
        return;
    };
    let rows_with = |bad: &str| {
        format!("SELECT * FROM (VALUES (1::float8, 2::float8), (3, 4), {bad}, (7, 8)) AS t(x1, x2)")
    };
    for (bad, says) in [
        ("(5, NULL)", "row 3: column x2 is NULL"),
        ("('NaN', 6)", "row 3: column x1 is NaN, not a finite number"),
        (
            "(5, 'Infinity')",
            "row 3: column x2 is inf, not a finite number",
        ),
        (
            "('-Infinity', 6)",
            "row 3: column x1 is -inf, not a finite number",
        ),
    ] {
        let message = server.refusal(&rows_with(bad));
        assert!(message.contains(says), "{bad}: {message}");
    }
}

#[tokio::test]
async fn columns_must_be_the_models_by_name_and_order() {
    let Some(server) = shared("columns_must_be_the_models_by_name_and_order").await else {
        return;
    };
    for (columns, got) in [
        ("1::float8 AS x1", "(x1)"),
        (
            "1::float8 AS x1, 2::float8 AS x2, 3::float8 AS x3",
            "(x1, x2, x3)",
        ),
        ("1::float8 AS x1, 2::float8 AS y2", "(x1, y2)"),
        ("2::float8 AS x2, 1::float8 AS x1", "(x2, x1)"),
    ] {
        let message = server.refusal(&format!("SELECT {columns}"));
        assert!(
            message.contains(&format!("the query's columns are {got}, expected (x1, x2)")),
            "{message}"
        );
    }
}

#[tokio::test]
async fn an_empty_result_a_parameter_and_a_write_are_refused() {
    let Some(server) = shared("an_empty_result_a_parameter_and_a_write_are_refused").await else {
        return;
    };
    let client = server.client().await;
    put_table(&client, "kept_rows", &rows()).await;
    let message = server.refusal("SELECT x1, x2 FROM kept_rows WHERE x1 > 1e308 AND x1 < 0");
    assert!(message.ends_with("holds no rows"), "{message}");
    let message = server.refusal("SELECT x1, x2 FROM kept_rows WHERE id = $1");
    assert!(message.contains("must take no parameters"), "{message}");
    let message = server.refusal("DELETE FROM kept_rows RETURNING x1, x2");
    assert!(message.contains("read-only transaction"), "{message}");
    let left: i64 = client
        .query_one("SELECT count(*) FROM kept_rows", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, rows().n() as i64);
    let message = server.refusal("SELEC x1, x2");
    assert!(message.contains("cannot prepare the query"), "{message}");
}

/// A party whose data is `query`, its password in a file beside its config; loaded as
/// `party serve` loads it.
fn party(dir: &Path, server: &Server<impl Sized>, query: &str, password: &str) -> PartyConfig {
    write_secret(&dir.join("token"), "a-token-of-enough-length\n").unwrap();
    write_secret(&dir.join("pg-password"), &format!("{password}\n")).unwrap();
    let config = PartyConfig {
        name: "alpha".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ledger: "ledger.sqlite".into(),
        auth_token_file: "token".into(),
        neighbours: Neighbours::Substitute,
        budget: BudgetConfig {
            epsilon: 1.0,
            delta: 1e-6,
            accountant: Default::default(),
        },
        data: DataConfig {
            format: DataFormat::Postgres(PostgresSource {
                password: Some(PasswordSource::File("pg-password".into())),
                ..server.source(query)
            }),
            path: Default::default(),
            table: Default::default(),
        },
        model: Some(ModelSpec::flat_banana(2)),
        limits: Default::default(),
        tls: None,
        metrics_listen: None,
        insecure: true,
    };
    let path = dir.join("party.toml");
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
    PartyConfig::load(&path).unwrap()
}

#[tokio::test]
async fn a_party_starts_on_good_rows_and_refuses_to_start_on_a_bad_one() {
    let Some(server) = shared("a_party_starts_on_good_rows_and_refuses_to_start").await else {
        return;
    };
    put_table(&server.client().await, "party_rows", &rows()).await;
    let dir = tempfile::tempdir().unwrap();
    let good = party(
        dir.path(),
        &server,
        "SELECT x1, x2 FROM party_rows ORDER BY id",
        &server.password,
    );
    let opened = fedmcmc_party::open(&good).unwrap();
    assert_eq!(opened.node.describe().rows, rows().n() as u64);
    drop(opened);
    let bad = party(
        dir.path(),
        &server,
        "SELECT x1, CASE WHEN id = 17 THEN NULL ELSE x2 END AS x2 FROM party_rows ORDER BY id",
        &server.password,
    );
    let message = format!("{:#}", fedmcmc_party::open(&bad).err().unwrap());
    assert!(message.contains("row 17: column x2 is NULL"), "{message}");
}

/// Everything a subscriber at TRACE level receives, tokio-postgres's `log` records included.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn no_message_or_log_line_holds_the_password() {
    let Some(server) = shared("no_message_or_log_line_holds_the_password").await else {
        return;
    };
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .try_init()
        .unwrap();
    let wrong = format!("wrong-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let query = "SELECT 1::float8 AS x1, 2::float8 AS x2";
    let mut messages = vec![];
    // A wrong password: the server's refusal, without the password tried.
    let config = party(dir.path(), &server, query, &wrong);
    let message = format!("{:#}", fedmcmc_party::open(&config).err().unwrap());
    assert!(
        message.contains("password authentication failed for user"),
        "{message}"
    );
    messages.push(message);
    // The right one, from the file: the party starts.
    let config = party(dir.path(), &server, query, &server.password);
    fedmcmc_party::open(&config).unwrap();
    // A password file others may read is refused before it is read.
    let file = dir.path().join("pg-password");
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let message = format!("{:#}", fedmcmc_party::open(&config).err().unwrap());
    assert!(message.contains("chmod 600"), "{message}");
    messages.push(message);
    // A password in the connection string is refused when the config is read.
    let inline = format!("{} password={wrong}", server.connection);
    let toml = std::fs::read_to_string(dir.path().join("party.toml")).unwrap();
    let toml = toml.replace(&server.connection, &inline);
    assert!(toml.contains(&inline));
    std::fs::write(dir.path().join("party.toml"), toml).unwrap();
    let message = PartyConfig::load(&dir.path().join("party.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("data.connection holds a password"),
        "{message}"
    );
    messages.push(message);

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    // The capture works: tokio-postgres's own debug lines are in it.
    assert!(logs.contains("preparing query"), "{logs}");
    for text in messages.iter().chain([&logs]) {
        assert!(
            !text.contains(&wrong) && !text.contains(&server.password),
            "{text}"
        );
    }
}

/// Counts the heap in use and its peak, for the streaming check below.
struct CountingHeap;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call goes to `System` unchanged; the counters are only read.
unsafe impl GlobalAlloc for CountingHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `System.alloc`'s own contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from `alloc`/`realloc` above, i.e. from `System`.
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` came from `System`, as above.
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            if new_size > layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static HEAP: CountingHeap = CountingHeap;

/// The most heap in use at once while `work` runs, above what was in use before it.
async fn peak_during<T>(work: impl Future<Output = T>) -> (T, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = work.await;
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(before))
}

/// 200 000 rows stream in: at no time does the loader hold much more than the columns it
/// builds. Those take at most 3·n·d·8 bytes at their peak (each column's buffer at most
/// twice its length while growing, then one copy into `Columns`); collecting the rows first
/// would add a `Row` per row (its buffer, its column offsets, its share of the read buffers),
/// several times that. The same measurement of `Client::query`, which collects, shows it.
#[tokio::test]
async fn a_large_table_streams_without_holding_its_rows_twice() {
    let Some(server) = alone("a_large_table_streams_without_holding_its_rows_twice").await else {
        return;
    };
    const N: usize = 200_000;
    let client = server.client().await;
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS large_rows;
             CREATE TABLE large_rows AS
                 SELECT g AS id, g * 0.5::float8 AS x1, -g / 3::float8 AS x2
                 FROM generate_series(1, {N}) AS g"
        ))
        .await
        .unwrap();
    let query = "SELECT x1, x2 FROM large_rows ORDER BY id";
    let (loaded, loader_peak) = peak_during(async { server.load(query, 2).unwrap() }).await;
    for i in 0..N {
        let g = (i + 1) as f64;
        assert_eq!(
            [loaded.col(0)[i], loaded.col(1)[i]],
            [g * 0.5, -g / 3.0],
            "row {}",
            i + 1
        );
    }
    let columns = N * 2 * size_of::<f64>();
    let bound = 3 * columns + (1 << 20);
    let (collected, collecting_peak) = peak_during(client.query(query, &[])).await;
    assert_eq!(collected.unwrap().len(), N);
    let _ = writeln!(
        std::io::stderr(),
        "postgres::a_large_table_streams: {N} rows × 2: columns {columns} B, loader's peak \
         {loader_peak} B (bound {bound} B), collecting rows {collecting_peak} B"
    );
    assert!(loader_peak <= bound, "{loader_peak} > {bound}");
    assert!(collecting_peak > bound, "{collecting_peak} <= {bound}");
}
