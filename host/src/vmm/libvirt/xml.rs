//! Where things are in a domain's text: an element's byte range, where its
//! start tag ends, how its children are indented, which quote it writes,
//! and libvirt's numbers (`0x1b` or decimal). The patcher edits at these
//! places, so what it does not touch stays byte for byte.

use std::ops::Range;

use roxmltree::Node;

/// An element, located: its range and the indentation of its children.
#[derive(Debug, Clone)]
pub struct Element {
    /// The whole element, start tag to end tag.
    pub range: Range<usize>,
    /// Where its last child element ends, or its start tag (None when it has
    /// no child elements).
    pub last_child_end: Option<usize>,
    /// The start tag's end (after `>`), or the `/>` when self-closing.
    pub start_tag_end: usize,
    /// Whether it is written `<x/>`.
    pub self_closing: bool,
    /// Its qualified name as written (`qemu:override`).
    pub qname: String,
    /// Its own indentation.
    pub indent: String,
    /// Its children's indentation.
    pub child_indent: String,
}

/// The first child element named `name`.
pub(super) fn child<'a, 'i>(n: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    n.children()
        .find(|c| c.is_element() && c.has_tag_name(name))
}

/// A number as libvirt and QEMU write it: `0x1b` (or `0X1B`) or decimal.
pub(super) fn int(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// 1-based line of byte `pos`.
pub(super) fn line_of(text: &str, pos: usize) -> u32 {
    text[..pos].bytes().filter(|b| *b == b'\n').count() as u32 + 1
}

/// The whitespace between the start of `pos`'s line and `pos`.
pub(super) fn indent_before(text: &str, pos: usize) -> String {
    let line_start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let lead = &text[line_start..pos];
    if lead.chars().all(char::is_whitespace) {
        lead.to_string()
    } else {
        String::new()
    }
}

/// Where the start tag of `n` ends (after `>`), honouring quoted values.
pub(super) fn start_tag_end(text: &str, n: Node) -> (usize, bool) {
    let bytes = text.as_bytes();
    let mut quote = None;
    let mut i = n.range().start;
    while i < n.range().end {
        match (quote, bytes[i]) {
            (None, b'\'' | b'"') => quote = Some(bytes[i]),
            (Some(q), c) if c == q => quote = None,
            (None, b'>') => return (i + 1, i > 0 && bytes[i - 1] == b'/'),
            _ => {}
        }
        i += 1;
    }
    (n.range().end, true)
}

/// The quote the start tag of `n` writes its attributes with.
pub(super) fn start_tag_quote(text: &str, n: Node) -> char {
    let (end, _) = start_tag_end(text, n);
    let tag = &text[n.range().start..end];
    if tag.contains('"') && !tag.contains('\'') {
        '"'
    } else {
        '\''
    }
}

/// `n` located in `text`.
pub(super) fn element(text: &str, n: Node) -> Element {
    let (start_tag_end, self_closing) = start_tag_end(text, n);
    let last = n.children().rfind(Node::is_element);
    let indent = indent_before(text, n.range().start);
    let child_indent = n
        .children()
        .find(Node::is_element)
        .map(|c| indent_before(text, c.range().start))
        .unwrap_or_else(|| format!("{indent}  "));
    Element {
        range: n.range(),
        last_child_end: last.map(|c| c.range().end),
        start_tag_end,
        self_closing,
        qname: text[n.range().start + 1..]
            .split(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .next()
            .unwrap_or_default()
            .to_string(),
        indent,
        child_indent,
    }
}
