//! vp2p's own contract for the Cloud Hypervisor requests it emits
//! (tests/contracts/cloud-hypervisor-requests.json): a JSON Schema per request
//! and answer body, each field's type and range cited there to Cloud
//! Hypervisor v53.0, and the command-line keys `plan --emit cloud-hypervisor`
//! may use.

use std::path::PathBuf;

use serde_json::Value;

/// Where the contract lives.
pub fn path() -> PathBuf {
    crate::repo_root().join("tests/contracts/cloud-hypervisor-requests.json")
}

/// The contract as JSON.
pub fn contract() -> Value {
    let path = path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The contract's entry for the endpoint at `path` (`/api/v1/vm.add-device`).
pub fn endpoint(path: &str) -> Value {
    contract()["endpoints"]
        .as_array()
        .expect("endpoints[]")
        .iter()
        .find(|e| e["path"] == path)
        .unwrap_or_else(|| panic!("the contract has no endpoint {path}"))
        .clone()
}

/// A compiled schema of the contract.
pub struct BodyCheck {
    validator: jsonschema::Validator,
}

impl BodyCheck {
    /// The request body schema of the endpoint at `path`.
    pub fn request(path: &str) -> BodyCheck {
        Self::compile(&endpoint(path)["request"], path)
    }

    /// The body schema of the endpoint's answer with `status`.
    pub fn answer(path: &str, status: u16) -> BodyCheck {
        let e = endpoint(path);
        Self::compile(&e["answers"][status.to_string()]["body"], path)
    }

    /// Compiles `schema` (a draft 2020-12 JSON Schema).
    pub fn compile(schema: &Value, what: &str) -> BodyCheck {
        assert!(schema.is_object(), "{what}: no schema in the contract");
        let validator = jsonschema::draft202012::new(schema)
            .unwrap_or_else(|e| panic!("{what}: the contract's schema does not compile: {e}"));
        BodyCheck { validator }
    }

    /// Ok, or every violation in one message.
    pub fn check(&self, body: &Value) -> Result<(), String> {
        let errors: Vec<String> = self
            .validator
            .iter_errors(body)
            .map(|e| format!("{} at {}", e, e.instance_path))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// The statuses the contract lists for the endpoint at `path`.
pub fn answer_statuses(path: &str) -> Vec<u16> {
    endpoint(path)["answers"]
        .as_object()
        .expect("answers{}")
        .keys()
        .map(|k| k.parse().expect("a status code"))
        .collect()
}
