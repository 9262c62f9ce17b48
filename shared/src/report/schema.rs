//! The JSON Schema of every document the tools print: one contract, generated
//! from the types that print it and kept in docs/schemas.

use schemars::Schema;

/// A document: its name on the command line, its schema tag, its schema.
pub type Document = (&'static str, &'static str, Schema);

/// What `schema` prints: the list of documents, or one document's schema with
/// its `$id`; an error names the choices.
pub fn render(docs: &[Document], name: Option<&str>) -> Result<String, String> {
    let Some(n) = name else {
        return Ok(docs
            .iter()
            .map(|(name, tag, _)| format!("{name:<10}{tag}\n"))
            .collect());
    };
    let (_, tag, schema) = docs
        .iter()
        .find(|(name, _, _)| name.eq_ignore_ascii_case(n))
        .ok_or_else(|| {
            let names: Vec<&str> = docs.iter().map(|d| d.0).collect();
            format!("no document '{n}': one of {}", names.join(", "))
        })?;
    let mut v = schema.as_value().clone();
    v["$id"] = serde_json::Value::String(format!("https://vp2p.invalid/schemas/{tag}"));
    serde_json::to_string_pretty(&v)
        .map(|t| t + "\n")
        .map_err(|e| e.to_string())
}
