//! The NCCL variables that change a P2P, SHM or GPUDirect RDMA verdict, and
//! where each value came from (the environment, or an nccl.conf file, which
//! NCCL reads for variables the environment leaves unset).

use serde::{Deserialize, Serialize};

use super::path::PathType;

/// The variables this module reads, in the order they are reported.
pub const VARIABLES: [&str; 9] = [
    "NCCL_TOPO_FILE",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET_DISABLE_INTRA",
    "NCCL_IGNORE_DISABLED_P2P",
    "NCCL_PXN_DISABLE",
];

/// One variable's value and its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Setting {
    /// `NCCL_P2P_LEVEL`.
    pub name: String,
    /// As written.
    pub value: String,
    /// `environment`, or the nccl.conf file's path.
    pub source: String,
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={} ({})", self.name, self.value, self.source)
    }
}

/// The NCCL variables in force.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclEnv {
    /// Every variable of [`VARIABLES`] that is set.
    pub settings: Vec<Setting>,
}

/// `strtol(s, NULL, 0)` as NCCL's parameters read numbers: leading digits
/// (0x for hex), 0 when there are none.
fn strtol(s: &str) -> i64 {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        let d: String = h.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        i64::from_str_radix(&d, 16).unwrap_or(0)
    } else {
        let d: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
        d.parse().unwrap_or(0)
    };
    if neg {
        -v
    } else {
        v
    }
}

impl NcclEnv {
    /// From `(name, value, source)` triples, the first of each name winning
    /// (the environment first, then the conf files, as NCCL's `setenv(..., 0)`
    /// keeps what is already set). Names outside [`VARIABLES`] are ignored.
    pub fn from_sources<'a>(items: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> Self {
        let mut settings: Vec<Setting> = Vec::new();
        for (name, value, source) in items {
            if VARIABLES.contains(&name) && !settings.iter().any(|s| s.name == name) {
                settings.push(Setting {
                    name: name.into(),
                    value: value.into(),
                    source: source.into(),
                });
            }
        }
        settings.sort_by_key(|s| VARIABLES.iter().position(|v| *v == s.name));
        NcclEnv { settings }
    }

    /// The setting for `name`.
    pub fn get(&self, name: &str) -> Option<&Setting> {
        self.settings.iter().find(|s| s.name == name)
    }

    fn int(&self, name: &str, default: i64) -> (i64, Option<&Setting>) {
        match self.get(name) {
            Some(s) => (strtol(&s.value), Some(s)),
            None => (default, None),
        }
    }

    /// The user's P2P level (`ncclGetUserP2pLevel`): `NCCL_P2P_DISABLE=1`
    /// means LOC, else a valid `NCCL_P2P_LEVEL`; None leaves NCCL's default.
    pub fn p2p_level(&self) -> Option<(PathType, &Setting)> {
        if let Some(s) = self.get("NCCL_P2P_DISABLE") {
            if strtol(&s.value) == 1 {
                return Some((PathType::Loc, s));
            }
        }
        let s = self.get("NCCL_P2P_LEVEL")?;
        PathType::from_level(&s.value).map(|l| (l, s))
    }

    /// The user's GPUDirect RDMA level (`NCCL_NET_GDR_LEVEL`).
    pub fn gdr_level(&self) -> Option<(PathType, &Setting)> {
        let s = self.get("NCCL_NET_GDR_LEVEL")?;
        PathType::from_level(&s.value).map(|l| (l, s))
    }

    /// `NCCL_NET_GDR_READ` (default -2: decided by the GPU).
    pub fn gdr_read(&self) -> (i64, Option<&Setting>) {
        self.int("NCCL_NET_GDR_READ", -2)
    }

    /// `NCCL_SHM_DISABLE=1`.
    pub fn shm_disabled(&self) -> Option<&Setting> {
        match self.int("NCCL_SHM_DISABLE", 0) {
            (1, s) => s,
            _ => None,
        }
    }

    /// `NCCL_NET_DISABLE_INTRA=1`.
    pub fn net_intra_disabled(&self) -> Option<&Setting> {
        match self.int("NCCL_NET_DISABLE_INTRA", 0) {
            (1, s) => s,
            _ => None,
        }
    }

    /// `NCCL_IGNORE_DISABLED_P2P` (default 0).
    pub fn ignore_disabled_p2p(&self) -> (i64, Option<&Setting>) {
        self.int("NCCL_IGNORE_DISABLED_P2P", 0)
    }
}

/// Reads an nccl.conf text as NCCL 2.28's `setEnvFile` does
/// (src/misc/param.cc): lines starting with `#` skipped, the name is
/// everything before the first `=` and the value everything after it, both
/// untrimmed.
pub fn parse_conf(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disable_wins_over_level_and_only_when_one() {
        let e = NcclEnv::from_sources([
            ("NCCL_P2P_LEVEL", "SYS", "environment"),
            ("NCCL_P2P_DISABLE", "1", "environment"),
        ]);
        assert_eq!(e.p2p_level().map(|x| x.0), Some(PathType::Loc));
        let e = NcclEnv::from_sources([
            ("NCCL_P2P_LEVEL", "SYS", "environment"),
            ("NCCL_P2P_DISABLE", "0", "environment"),
        ]);
        assert_eq!(e.p2p_level().map(|x| x.0), Some(PathType::Sys));
        // An unknown level name leaves NCCL's default.
        let e = NcclEnv::from_sources([("NCCL_P2P_LEVEL", "FAST", "environment")]);
        assert_eq!(e.p2p_level(), None);
    }

    #[test]
    fn environment_beats_conf_file() {
        let e = NcclEnv::from_sources([
            ("NCCL_SHM_DISABLE", "1", "environment"),
            ("NCCL_SHM_DISABLE", "0", "/etc/nccl.conf"),
        ]);
        assert_eq!(
            e.shm_disabled().map(|s| s.source.as_str()),
            Some("environment")
        );
        assert_eq!(
            parse_conf("# c\nNCCL_P2P_LEVEL=PIX\nbad\nNCCL_SHM_DISABLE =1"),
            vec![
                ("NCCL_P2P_LEVEL".into(), "PIX".into()),
                // The space stays in the name, so NCCL never sees this one.
                ("NCCL_SHM_DISABLE ".into(), "1".into())
            ]
        );
    }
}
