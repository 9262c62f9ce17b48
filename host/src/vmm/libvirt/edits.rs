//! The edits a patch makes: insertions and replacements at byte ranges of the
//! original domain, written in its quotes, indentation and QEMU prefix, and
//! applied in one pass so every other byte stays as it was.

use std::ops::Range;

use super::domain::{Domain, Element};
use super::patch::Patched;

/// One change: `text` replaces `at` (an insertion when `at` is empty).
#[derive(Debug)]
pub(super) struct Edit {
    at: Range<usize>,
    text: String,
}

/// Collects edits in the order they are made; applies them by position.
pub(super) struct Edits<'d> {
    domain: &'d Domain<'d>,
    edits: Vec<Edit>,
    /// One line per change made, for the user.
    pub(super) changes: Vec<String>,
    prefix: String,
    /// One level of the domain's indentation (a tab for KubeVirt's).
    pub(super) unit: String,
}

impl<'d> Edits<'d> {
    pub(super) fn new(domain: &'d Domain<'d>) -> Self {
        Edits {
            domain,
            edits: Vec::new(),
            changes: Vec::new(),
            prefix: domain.qemu_prefix.clone().unwrap_or_else(|| "qemu".into()),
            unit: domain
                .root
                .child_indent
                .strip_prefix(domain.root.indent.as_str())
                .filter(|u| !u.is_empty())
                .unwrap_or("  ")
                .to_string(),
        }
    }

    /// `snippet` as written in this domain: its quote, its indentation and
    /// its QEMU prefix. Snippets are written with single quotes and two
    /// spaces a level. Only indentation is restyled, the leading spaces of
    /// the lines after the first: the first line continues wherever the
    /// caller puts it, so what it starts with is content (the space before
    /// ` xmlns:qemu=...` stays, whatever the domain indents with).
    pub(super) fn styled(&self, snippet: &str) -> String {
        let snippet = if self.unit == "  " {
            snippet.to_string()
        } else {
            reindented(snippet, &self.unit)
        };
        let s = if self.prefix == "qemu" {
            snippet.to_string()
        } else {
            snippet
                .replace("<qemu:", &format!("<{}:", self.prefix))
                .replace("</qemu:", &format!("</{}:", self.prefix))
        };
        if self.domain.quote == '"' {
            s.replace('\'', "\"")
        } else {
            s
        }
    }

    pub(super) fn insert(&mut self, at: usize, text: String) {
        self.edits.push(Edit { at: at..at, text });
    }

    pub(super) fn replace(&mut self, at: Range<usize>, text: String) {
        self.edits.push(Edit { at, text });
    }

    /// `snippet` (one or more lines) as the new last child of `parent`.
    pub(super) fn append_child(&mut self, parent: &Element, snippet: &str) {
        let styled = self.styled(snippet);
        self.append_styled(parent, &styled);
    }

    /// Like `append_child`, for a snippet already in the domain's style.
    pub(super) fn append_styled(&mut self, parent: &Element, styled: &str) {
        let block = lines_at(&parent.child_indent, styled);
        if parent.self_closing {
            let close = format!(">{block}\n{}</{}>", parent.indent, parent.qname);
            let end = parent.start_tag_end;
            self.replace(end - 2..end, close);
        } else {
            let at = parent.last_child_end.unwrap_or(parent.start_tag_end);
            self.insert(at, block);
        }
    }

    pub(super) fn apply(mut self) -> Patched {
        self.edits.sort_by_key(|e| e.at.start);
        let text = self.domain.text;
        let mut out = String::with_capacity(text.len() + 4096);
        let mut pos = 0;
        for e in &self.edits {
            out.push_str(&text[pos..e.at.start]);
            out.push_str(&e.text);
            pos = e.at.end;
        }
        out.push_str(&text[pos..]);
        Patched {
            text: out,
            changes: self.changes,
        }
    }
}

/// `snippet` with two leading spaces of each line after the first as one
/// `unit` (an odd space left as it is).
fn reindented(snippet: &str, unit: &str) -> String {
    let mut out = String::with_capacity(snippet.len());
    for (i, l) in snippet.lines().enumerate() {
        if i == 0 {
            out.push_str(l);
            continue;
        }
        let body = l.trim_start_matches(' ');
        let spaces = l.len() - body.len();
        out.push('\n');
        out.push_str(&unit.repeat(spaces / 2));
        out.push_str(&" ".repeat(spaces % 2));
        out.push_str(body);
    }
    out
}

/// `snippet`'s lines, each on a new line indented by `indent`.
pub(super) fn lines_at(indent: &str, snippet: &str) -> String {
    snippet.lines().map(|l| format!("\n{indent}{l}")).collect()
}
