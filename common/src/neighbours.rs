//! Neighbour relations: which pairs of data sets a guarantee protects against telling apart.
use serde::{Deserialize, Serialize};

/// Substitute (replace one row) or add/remove (one row more or fewer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Neighbours {
    Substitute,
    AddRemove,
}

impl Neighbours {
    /// L2 sensitivity of a sum of per-row values each clipped to `[-bound, bound]`:
    /// substituting a row can move the sum by `2·bound`, adding or removing one by `bound`
    /// (DESIGN §3, Räisä 2020, Sec. 3.1).
    pub fn clipped_sum_sensitivity(self, bound: f64) -> f64 {
        match self {
            Neighbours::Substitute => 2.0 * bound,
            Neighbours::AddRemove => bound,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Neighbours::Substitute => "substitute",
            Neighbours::AddRemove => "add-remove",
        }
    }
}

impl std::str::FromStr for Neighbours {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "substitute" => Ok(Neighbours::Substitute),
            "add-remove" => Ok(Neighbours::AddRemove),
            other => Err(format!(
                "unknown neighbour relation {other:?}: expected \"substitute\" or \"add-remove\""
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitute_doubles_the_clip() {
        assert_eq!(Neighbours::Substitute.clipped_sum_sensitivity(1.5), 3.0);
        assert_eq!(Neighbours::AddRemove.clipped_sum_sensitivity(1.5), 1.5);
        assert_eq!(
            "add-remove".parse::<Neighbours>(),
            Ok(Neighbours::AddRemove)
        );
        assert!("swap".parse::<Neighbours>().is_err());
    }
}
