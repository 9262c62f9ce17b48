//! Validation of request bodies against Cloud Hypervisor's own OpenAPI spec
//! (tests/contracts/cloud-hypervisor-openapi.yaml, copied unmodified).
//!
//! OpenAPI 3.0 schemas are JSON Schema with extra integer formats (int8,
//! uint8, ...) that JSON Schema validators do not check; they are turned into
//! the minimum/maximum they mean before validation. Unknown properties are
//! refused, so a misspelt field fails instead of being ignored.

use serde_json::{json, Value};

/// The spec as JSON.
pub fn spec() -> Value {
    let path = crate::repo_root().join("tests/contracts/cloud-hypervisor-openapi.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn integer_range(format: &str) -> Option<(i64, u64)> {
    Some(match format {
        "int8" => (i8::MIN.into(), i8::MAX as u64),
        "uint8" => (0, u8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX as u64),
        "uint16" => (0, u16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX as u64),
        "uint32" => (0, u32::MAX.into()),
        "int64" => (i64::MIN, i64::MAX as u64),
        "uint64" => (0, u64::MAX),
        _ => return None,
    })
}

/// Adds the ranges of integer formats and forbids unknown properties.
fn tighten(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let is_int = map.get("type").and_then(Value::as_str) == Some("integer");
            if let (true, Some((lo, hi))) = (
                is_int,
                map.get("format")
                    .and_then(Value::as_str)
                    .and_then(integer_range),
            ) {
                map.insert("minimum".into(), json!(lo));
                map.insert("maximum".into(), json!(hi));
            }
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            map.values_mut().for_each(tighten);
        }
        Value::Array(items) => items.iter_mut().for_each(tighten),
        _ => {}
    }
}

/// A validator for `components/schemas/<name>`.
pub struct SchemaCheck {
    validator: jsonschema::Validator,
}

impl SchemaCheck {
    /// A validator for the spec's schema `name`; panics when the spec has none.
    pub fn component(name: &str) -> SchemaCheck {
        let spec = spec();
        let mut components = spec["components"].clone();
        assert!(
            components["schemas"][name].is_object(),
            "no schema {name} in the spec"
        );
        tighten(&mut components);
        let root =
            json!({"$ref": format!("#/components/schemas/{name}"), "components": components});
        let validator = jsonschema::draft4::new(&root).expect("the spec's schemas compile");
        SchemaCheck { validator }
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
