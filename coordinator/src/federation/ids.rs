//! Names from outside the coordinator that become file names: the run ids a party answers
//! to OpenRun (`<run id>.chain-<c>.jsonl` in the checkpoint) and the configured party names
//! (`checkpoint/parties/<name>/`). Each is checked where it enters, against a fixed
//! alphabet, so that no such name can climb out of its directory or name a hidden file.

/// The longest run id or party name taken (a party's run ids are 32 hex digits).
pub const MAX_LEN: usize = 64;

/// Whether `s` is 1 to [`MAX_LEN`] of `A-Z a-z 0-9 _ -` and `also`, not starting with `.`.
fn fits(s: &str, also: &[u8]) -> bool {
    (1..=MAX_LEN).contains(&s.len())
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || also.contains(&b))
}

/// `s` in `{:?}`, cut short past a few lengths: a hostile answer may be long.
fn shown(s: &str) -> String {
    const SHOWN: usize = 2 * MAX_LEN;
    match s.char_indices().nth(SHOWN) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &s[..end], s.len()),
    }
}

/// A run id a party answered to OpenRun: 1 to 64 of `A-Z a-z 0-9 _ -`.
pub fn check_run_id(run_id: &str) -> Result<(), String> {
    if fits(run_id, b"") {
        return Ok(());
    }
    Err(format!(
        "answered OpenRun with the run id {}, which is not one: a run id is 1 to {MAX_LEN} of A-Z, a-z, 0-9, '_' and '-'",
        shown(run_id)
    ))
}

/// A configured party name: 1 to 64 of `A-Z a-z 0-9 _ - .`, not starting with `.` (a
/// certificate's DNS name fits).
pub fn check_party_name(name: &str) -> Result<(), String> {
    if fits(name, b".") {
        return Ok(());
    }
    Err(format!(
        "the party name {} cannot name its checkpoint directory: a party name is 1 to {MAX_LEN} of A-Z, a-z, 0-9, '_', '-' and '.', not starting with '.'",
        shown(name)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parties_run_ids_pass_and_path_like_ones_do_not() {
        assert!(check_run_id("0123456789abcdef0123456789abcdef").is_ok());
        assert!(check_run_id(&"a".repeat(MAX_LEN)).is_ok());
        let long = "a".repeat(200);
        for bad in [
            "", "../x", "a/b", "a\\b", ".", "..", "a b", "a\0b", "a.b", &long,
        ] {
            let e = check_run_id(bad).unwrap_err();
            assert!(e.contains("which is not one"), "{bad:?}: {e}");
        }
        assert!(check_run_id("a\0b").unwrap_err().contains(r#""a\0b""#));
        assert!(check_run_id(&long).unwrap_err().contains("(200 bytes)"));
    }

    #[test]
    fn party_names_may_carry_dots_but_not_climb() {
        for good in ["a", "party-1", "clinic_a", "lab-c.example.org"] {
            assert!(check_party_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "a b",
            &"p".repeat(65),
        ] {
            assert!(check_party_name(bad).is_err(), "{bad:?}");
        }
    }
}
