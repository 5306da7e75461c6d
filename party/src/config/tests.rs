use super::*;

/// A party.toml whose `[budget]` has `accountant_line` (or none).
fn load_with(accountant_line: Option<&str>) -> Result<PartyConfig, ConfigError> {
    load_replacing("accountant = \"best\"\n", accountant_line.unwrap_or(""))
}

/// The `[data]` table as a SQLite config is written.
const SQLITE_DATA: &str = "[data]\nformat = \"sqlite\"\npath = \"rows.sqlite\"\ntable = \"rows\"\n";

/// A party.toml whose `[data]` table holds `lines`.
fn load_data(lines: &str) -> Result<PartyConfig, ConfigError> {
    load_replacing(SQLITE_DATA, &format!("[data]\n{lines}\n"))
}

/// A valid party.toml (SQLite data), with `from` replaced by `to`.
fn load_replacing(from: &str, to: &str) -> Result<PartyConfig, ConfigError> {
    let config = PartyConfig {
        name: "alpha".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ledger: "ledger.sqlite".into(),
        auth_token_file: "token".into(),
        neighbours: Neighbours::Substitute,
        budget: BudgetConfig {
            epsilon: 1.0,
            delta: 1e-6,
            accountant: Choice::Best,
        },
        data: DataConfig {
            format: DataFormat::Sqlite,
            path: "rows.sqlite".into(),
            table: "rows".into(),
        },
        model: Some(ModelSpec::flat_banana(2)),
        limits: RunLimits::default(),
        tls: None,
        metrics_listen: None,
        insecure: true,
    };
    let text = toml::to_string(&config).unwrap();
    assert!(text.contains(from), "{text}");
    let text = text.replace(from, to);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("party.toml");
    std::fs::write(&path, text).unwrap();
    PartyConfig::load(&path)
}

#[test]
fn the_accountant_is_best_unless_configured_and_checked_when_read() {
    let accountant = |line: Option<&str>| load_with(line).map(|c| c.budget.accountant);
    assert_eq!(accountant(None).unwrap(), Choice::Best);
    for key in ["analytic", "zcdp", "rdp", "pld", "best"] {
        let line = format!("accountant = \"{key}\"\n");
        assert_eq!(accountant(Some(&line)).unwrap().key(), key);
    }
    let err = accountant(Some("accountant = \"tight\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("not a valid party config")
            && err.contains(
                "unknown accountant 'tight', expected 'analytic', 'zcdp', 'rdp', 'pld' or 'best'"
            ),
        "{err}"
    );
}

#[test]
fn limits_default_when_absent_and_are_checked() {
    let text = toml::to_string(&load_with(None).unwrap()).unwrap();
    // The table comes last: the file without it is a config of an earlier version.
    let (without, _) = text.split_once("[limits]").expect(&text);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("party.toml");
    let with = |limits: &str| {
        std::fs::write(&path, format!("{without}{limits}")).unwrap();
        PartyConfig::load(&path)
    };
    assert_eq!(with("").unwrap().limits, RunLimits::default());
    let set =
        with("[limits]\nlease_seconds = 30\nmax_open_runs = 2\ndescribe_per_second = 5\n").unwrap();
    assert_eq!(
        set.limits,
        RunLimits {
            lease_seconds: 30,
            max_open_runs: 2,
            describe_per_second: 5,
            ..RunLimits::default()
        }
    );
    for key in ["max_chains", "describe_burst"] {
        let err = with(&format!("[limits]\n{key} = 0\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("limits.{key} must be at least 1")),
            "{err}"
        );
    }
}

#[test]
fn secrets_are_written_owner_only_and_loose_ones_are_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "old").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(readable_by_others(&path), Some(0o644));
    write_secret(&path, "a-token-of-enough-length\n").unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(readable_by_others(&path), None);
    let fresh = dir.path().join("fresh");
    write_secret(&fresh, "x").unwrap();
    assert_eq!(
        std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "a-token-of-enough-length\n"
    );
}

#[test]
fn the_data_section_reads_each_source_and_writes_sqlite_as_before() {
    let sqlite = load_data("path = \"rows.sqlite\"").unwrap().data;
    assert_eq!(sqlite.format, DataFormat::Sqlite);
    assert_eq!(
        (sqlite.path.file_name().unwrap(), sqlite.table.as_str()),
        ("rows.sqlite".as_ref(), "rows")
    );
    assert!(
        sqlite.path.is_absolute(),
        "resolved against the config's folder"
    );
    let csv = load_data("format = \"csv\"\npath = \"rows.csv\"")
        .unwrap()
        .data;
    assert_eq!(csv.format, DataFormat::Csv);
    let postgres = load_data(
        "format = \"postgres\"\nconnection = \"host=/run/postgresql dbname=clinic\"\n\
         query = \"SELECT x1, x2 FROM m\"\npassword_file = \"pg-password\"",
    )
    .unwrap();
    let DataFormat::Postgres(source) = &postgres.data.format else {
        panic!("{:?}", postgres.data);
    };
    assert_eq!(source.query, "SELECT x1, x2 FROM m");
    let Some(PasswordSource::File(file)) = &source.password else {
        panic!("{source:?}");
    };
    assert!(
        file.is_absolute() && file.ends_with("pg-password"),
        "{file:?}"
    );
    // Written back as read, with no SQLite keys.
    let text = toml::to_string(&postgres).unwrap();
    assert!(
        !text.contains("path =") && !text.contains("table ="),
        "{text}"
    );
    let again: PartyConfig = toml::from_str(&text).unwrap();
    assert_eq!(again.data.format, postgres.data.format);
    let by_env = load_data(
        "format = \"postgres\"\nconnection = \"postgresql://party@db.internal/clinic\"\n\
         query = \"SELECT x1, x2 FROM m\"\npassword_env = \"PARTY_PG_PASSWORD\"",
    )
    .unwrap();
    let DataFormat::Postgres(source) = by_env.data.format else {
        panic!();
    };
    assert_eq!(
        source.password,
        Some(PasswordSource::Env("PARTY_PG_PASSWORD".into()))
    );
}

#[test]
fn the_data_section_refuses_keys_that_do_not_fit_its_format() {
    let postgres = "format = \"postgres\"\nconnection = \"host=db\"\n";
    for (lines, says) in [
        ("format = \"sqlite\"", "data.path is required"),
        (
            "path = \"r.sqlite\"\nquery = \"SELECT 1\"",
            "keys of format = \"postgres\"",
        ),
        (
            &format!("{postgres}query = \"SELECT 1\"\ntable = \"t\""),
            "reads no file or table",
        ),
        (postgres, "needs query"),
        (
            &format!("{postgres}query = \" \""),
            "data.query must not be empty",
        ),
        (
            &format!("{postgres}query = \"q\"\npassword_file = \"f\"\npassword_env = \"V\""),
            "at most one of password_file and password_env",
        ),
        (
            &format!("{postgres}query = \"q\"\npassword_env = \"\""),
            "must name a variable",
        ),
        (
            "format = \"postgres\"\nconnection = \"host=db sslmode=require\"\nquery = \"q\"",
            "without TLS",
        ),
    ] {
        let err = load_data(lines).unwrap_err().to_string();
        assert!(err.contains(says), "{lines}: {err}");
    }
}

#[test]
fn a_password_in_the_config_is_refused_without_being_repeated() {
    let secret = "hunter2-secret";
    for (lines, says) in [
        (
            format!("connection = \"host=db user=u password={secret}\"\nquery = \"q\""),
            "data.connection holds a password",
        ),
        (
            format!("connection = \"postgresql://u:{secret}@db/x\"\nquery = \"q\""),
            "data.connection holds a password",
        ),
        (
            format!("connection = \"host=db password='{secret}\"\nquery = \"q\""),
            "not a valid connection string",
        ),
        (
            format!("connection = \"host=db\"\nquery = \"q\"\npassword = \"{secret}\""),
            "unknown field `password`",
        ),
    ] {
        let err = load_data(&format!("format = \"postgres\"\n{lines}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(says) && !err.contains(secret),
            "{lines}: {err}"
        );
    }
    // A parse error says where, without quoting the line.
    let err = load_data(&format!("path = \"r.sqlite\"\npassword = \"{secret}\""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("column 1: unknown field `password`"), "{err}");
}
