//! The JSON Schema of every document the tools print: one contract, generated
//! from the types that print it and kept in docs/schemas.

use schemars::Schema;

/// A document: its name on the command line, its schema tag, its schema.
pub type Document = (&'static str, &'static str, Schema);

/// Why a schema could not be printed.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// No document by that name.
    #[error("no document '{name}': one of {choices}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated.
        choices: String,
    },
    /// The schema did not serialise (a bug in a type's schema).
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// What `schema` prints: the list of documents, or one document's schema with
/// its `$id`; an error names the choices.
pub fn render(docs: &[Document], name: Option<&str>) -> Result<String, SchemaError> {
    let Some(n) = name else {
        let w = docs.iter().map(|d| d.0.len()).max().unwrap_or(0) + 2;
        return Ok(docs
            .iter()
            .map(|(name, tag, _)| format!("{name:<w$}{tag}\n"))
            .collect());
    };
    let (_, tag, schema) = docs
        .iter()
        .find(|(name, _, _)| name.eq_ignore_ascii_case(n))
        .ok_or_else(|| SchemaError::Unknown {
            name: n.to_string(),
            choices: docs.iter().map(|d| d.0).collect::<Vec<_>>().join(", "),
        })?;
    let mut v = schema.as_value().clone();
    v["$id"] = serde_json::Value::String(format!("https://vp2p.invalid/schemas/{tag}"));
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}
