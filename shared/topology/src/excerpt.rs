//! What an error may quote of untrusted text: a short prefix of a token, never
//! the whole of it (a 50 MB attribute once went twice into one message), and
//! an XML syntax error with the line where it is, the text's last line when the
//! text ends early; a JSON error with its depth named and its quotes short.

use std::borrow::Cow;

/// At most this many characters of one quoted token go into a message.
pub const QUOTE_MAX: usize = 64;

/// `s` as a message quotes it: whole when at most [`QUOTE_MAX`] characters,
/// else its first [`QUOTE_MAX`] characters, `...` and its length in bytes.
///
/// ```
/// use p2p_topology::excerpt::short;
/// assert_eq!(short("0000:00:06.0"), "0000:00:06.0");
/// let long = "a".repeat(1000);
/// assert_eq!(short(&long), format!("{}... (1000 bytes)", "a".repeat(64)));
/// ```
pub fn short(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(QUOTE_MAX) {
        None => Cow::Borrowed(s),
        Some((cut, _)) => Cow::Owned(format!("{}... ({} bytes)", &s[..cut], s.len())),
    }
}

/// The 1-based line of the text's last character that is not white space:
/// where a truncated document ends.
pub fn last_line(text: &str) -> u32 {
    let end = text.trim_end();
    u32::try_from(end.bytes().filter(|b| *b == b'\n').count() + 1).unwrap_or(u32::MAX)
}

/// A document that is not XML: the line and what is wrong, with any name it
/// holds quoted [`short`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlSyntax {
    /// 1-based line of the problem; for a text that ends before its root
    /// element closes, the text's last line.
    pub line: u32,
    /// What is wrong, in words (without the position: `line` says it).
    pub why: String,
}

/// `e`, from parsing `text`, said with its line and short quotes.
///
/// roxmltree writes names whole and gives line 1 to the errors that have no
/// position (a text that ends early); this gives the line where the text ends.
pub fn xml_syntax(text: &str, e: &roxmltree::Error) -> XmlSyntax {
    use roxmltree::Error as E;
    let line = e.pos().row;
    let (line, why) = match e {
        E::UnclosedRootNode => (
            last_line(text),
            "the text ends with the root element still open (truncated?)".to_string(),
        ),
        E::UnexpectedEndOfStream => (
            last_line(text),
            "the text ends in the middle of a tag or a value (truncated?)".to_string(),
        ),
        E::NoRootNode => (last_line(text), "no root element".to_string()),
        E::UnexpectedCloseTag(want, got, _) => {
            (line, format!("</{}> closes <{}>", short(got), short(want)))
        }
        E::DuplicatedNamespace(n, _) => (line, format!("namespace '{}' defined twice", short(n))),
        E::UnknownNamespace(n, _) => (line, format!("unknown namespace prefix '{}'", short(n))),
        E::UnknownEntityReference(n, _) => {
            (line, format!("unknown entity reference '{}'", short(n)))
        }
        E::DuplicatedAttribute(n, _) => (line, format!("attribute '{}' given twice", short(n))),
        E::EntityResolver(_, m) => (line, format!("entity resolver failed: {}", short(m))),
        // The other variants hold no text of the document.
        other => {
            let text = other.to_string();
            let at = format!(" at {}", other.pos());
            let why = text.strip_suffix(&at).map_or(text.clone(), str::to_string);
            (line, why)
        }
    };
    XmlSyntax { line, why }
}

/// The nesting serde_json refuses past (its default recursion limit, which no
/// reader of vp2p turns off).
pub const JSON_DEPTH_MAX: usize = 128;

/// `e`, a serde_json error, said short: a message past a few hundred bytes
/// (serde quotes a wrong string value whole) is cut to a short prefix with the
/// position kept, and the recursion limit is named with its depth.
pub fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let at = format!(" at line {} column {}", e.line(), e.column());
    let body = text.strip_suffix(&at).unwrap_or(&text);
    let body = if body.starts_with("recursion limit exceeded") {
        format!("nested deeper than {JSON_DEPTH_MAX} levels")
    } else if body.len() > 4 * QUOTE_MAX {
        short(body).into_owned()
    } else {
        body.to_string()
    };
    if e.line() == 0 {
        body
    } else {
        format!("{body}{at}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_cuts_on_a_character_boundary() {
        let s = "é".repeat(100);
        assert_eq!(short(&s), format!("{}... (200 bytes)", "é".repeat(64)));
        assert_eq!(short(&"x".repeat(64)), "x".repeat(64));
    }

    #[test]
    fn a_truncated_document_is_placed_at_its_last_line() {
        let text =
            "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:00:06.0\"\n";
        let e = roxmltree::Document::parse(text).unwrap_err();
        let s = xml_syntax(text, &e);
        assert_eq!(s.line, 3, "{s:?}");
        let text = "<system version=\"1\">\n  <cpu numaid=\"0\">\n  </cpu>\n\n";
        let e = roxmltree::Document::parse(text).unwrap_err();
        assert_eq!(xml_syntax(text, &e).line, 3);
    }

    #[test]
    fn a_huge_close_tag_is_quoted_short() {
        let text = format!("<system>\n</{}>", "a".repeat(100_000));
        let e = roxmltree::Document::parse(&text).unwrap_err();
        let s = xml_syntax(&text, &e);
        assert_eq!(s.line, 2);
        assert!(s.why.len() < 200, "{}", s.why.len());
        assert!(s.why.contains("(100000 bytes)"), "{}", s.why);
    }

    #[test]
    fn json_errors_name_the_depth_and_stay_short() {
        let deep = "[".repeat(100_000);
        let e = serde_json::from_str::<serde_json::Value>(&deep).unwrap_err();
        // serde_json stops at the 128th '[' (line 1, column 128).
        assert_eq!(
            json_error(&e),
            "nested deeper than 128 levels at line 1 column 128"
        );
        let huge = format!("\"{}\"", "a".repeat(1 << 20));
        let e = serde_json::from_str::<u32>(&huge).unwrap_err();
        let m = json_error(&e);
        assert!(
            m.len() < 200 && m.ends_with("at line 1 column 1048578"),
            "{m}"
        );
    }
}
