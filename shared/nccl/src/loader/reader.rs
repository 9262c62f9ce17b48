//! NCCL 2.28.3's own reader of topology files (`xmlLoadSub` and the
//! functions below it, src/graph/xml.cc:27-237 at v2.28.3-1), reproduced
//! from its behaviour. It is stricter than XML in places (no `<?xml?>`
//! declaration, no tab anywhere between or inside tags, the attributes on
//! the tag's line, at most 253 characters in a value) and looser in others
//! (entities are not decoded, unknown elements are skipped), with fixed
//! limits. Only the elements NCCL keeps become [`Element`]s, in NCCL's node
//! order; the others are read and dropped, as NCCL drops them.

/// `MAX_STR_LEN` (src/graph/xml.h:17): a name or value of this many
/// characters less one does not fit.
pub(super) const MAX_STR_LEN: usize = 255;
/// `MAX_ATTR_COUNT` (src/graph/xml.h:18): attributes past it are dropped.
pub(super) const MAX_ATTR_COUNT: usize = 16;
/// `MAX_SUBS` (src/graph/xml.h:19): children one element may keep.
pub(super) const MAX_SUBS: usize = 128;
/// `NCCL_TOPO_XML_MAX_NODES` (src/graph/topo.h:214): elements one file may
/// hold, counting only those NCCL keeps.
pub(super) const MAX_NODES: usize = 256;

/// One element NCCL keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Element {
    /// Its name (`cpu`, `pci`, ...).
    pub name: String,
    /// The attributes NCCL keeps, in the file's order (the first 16).
    pub attrs: Vec<(String, String)>,
    /// Keys of the attributes past the 16th, which NCCL drops.
    pub dropped: Vec<String>,
    /// The line of its `<`.
    pub line: u32,
    /// The element it sits in; None for a top-level `<system>`.
    pub parent: Option<usize>,
    /// Its kept children, in order.
    pub children: Vec<usize>,
}

impl Element {
    /// The value NCCL's `xmlGetAttr` finds: the first kept attribute of that key.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Where NCCL's reader stops, and what it prints there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SyntaxError {
    /// The line of the tag being read, or of the stray character.
    pub line: u32,
    /// The element being read (`<cpu>`), or where the reader was.
    pub node: String,
    /// NCCL's WARN text, after `NCCL WARN `.
    pub prints: String,
    /// NCCL's line that prints it.
    pub source: &'static str,
}

/// What NCCL's reader made of a text: the elements it kept up to where it
/// stopped, and why it stopped early.
#[derive(Debug, Clone, Default)]
pub(super) struct Read {
    /// Every kept element; top-level ones have no parent.
    pub elements: Vec<Element>,
    /// The error that stopped the reader; None when it read to the end.
    pub error: Option<SyntaxError>,
}

/// The children NCCL keeps below an element of this name (its handlers,
/// src/graph/xml.cc:341-400); None is the top level.
fn handled(parent: Option<&str>, name: &str) -> bool {
    let kept: &[&str] = match parent {
        None => &["system"],
        Some("system") => &["cpu"],
        Some("cpu") => &["pci", "nic"],
        Some("pci") => &["pci", "gpu", "nic", "pcilink"],
        Some("gpu") => &["nvlink", "c2c"],
        Some("nic") => &["net"],
        Some(_) => &[],
    };
    kept.contains(&name)
}

/// One tag as `xmlGetNode` reads it.
struct Tag {
    name: String,
    attrs: Vec<(String, String)>,
    dropped: Vec<String>,
    close: bool,
    single: bool,
    line: u32,
}

/// A name, or a `key="value"`, and the byte that ended it.
struct Token {
    name: Vec<u8>,
    value: Option<Vec<u8>>,
    end: u8,
}

/// What the reader is inside: the top level, a kept element, or an element
/// it skips (whose first closing tag of any name ends it, as NCCL reuses the
/// skipped element's slot for what it reads next).
#[derive(Clone, Copy)]
enum Frame {
    Top,
    Kept(usize),
    Skipped,
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: u32,
    elements: Vec<Element>,
}

/// A byte as NCCL's `%c` prints it, made readable when not ASCII.
fn shown(c: u8) -> String {
    if c.is_ascii() {
        char::from(c).to_string()
    } else {
        format!("\\x{c:02x}")
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Reader<'_> {
    fn fail(line: u32, node: String, prints: String, source: &'static str) -> SyntaxError {
        SyntaxError {
            line,
            node,
            prints,
            source,
        }
    }

    fn byte(&mut self) -> Option<u8> {
        let c = *self.bytes.get(self.pos)?;
        self.pos += 1;
        if c == b'\n' {
            self.line += 1;
        }
        Some(c)
    }

    /// `xmlGetChar`'s error at the end of the text.
    fn eof(&self, node: String) -> SyntaxError {
        Self::fail(
            self.line,
            node,
            "XML Parse : Unexpected EOF".into(),
            "src/graph/xml.cc:29",
        )
    }

    /// `xmlGetChar`: a byte, or NCCL's error at the end of the text.
    fn get(&mut self, node: &str) -> Result<u8, SyntaxError> {
        self.byte().ok_or_else(|| self.eof(node.into()))
    }

    /// `xmlGetValue`: a quoted value and the byte after its closing quote.
    fn value(&mut self, line: u32, node: &str) -> Result<(Vec<u8>, u8), SyntaxError> {
        let quote = self.get(node)?;
        if quote != b'"' && quote != b'\'' {
            return Err(Self::fail(
                line,
                node.into(),
                "XML Parse : Expected (double) quote.".into(),
                "src/graph/xml.cc:55",
            ));
        }
        let mut v = Vec::new();
        loop {
            let c = self.get(node)?;
            if v.len() == MAX_STR_LEN - 1 {
                return Err(Self::fail(
                    line,
                    node.into(),
                    format!("Error : value {} too long (max {MAX_STR_LEN})", text(&v)),
                    "src/graph/xml.cc:66",
                ));
            }
            if c == quote {
                break;
            }
            v.push(c);
        }
        Ok((v, self.get(node)?))
    }

    /// `xmlGetToken`: a name up to a space, `>`, `/` or line end, or a
    /// `key="value"`; with the byte that ended it.
    ///
    /// `node` names the element in errors; None while its name is the token.
    fn token(
        &mut self,
        with_value: bool,
        line: u32,
        node: Option<&str>,
    ) -> Result<Token, SyntaxError> {
        let label = |name: &[u8]| node.map_or_else(|| format!("<{}", text(name)), str::to_string);
        let mut name = Vec::new();
        loop {
            let Some(c) = self.byte() else {
                return Err(self.eof(label(&name)));
            };
            if c == b'=' {
                if !with_value {
                    return Err(Self::fail(
                        line,
                        label(&name),
                        format!("XML Parse : Unexpected value with name {}", text(&name)),
                        "src/graph/xml.cc:85",
                    ));
                }
                let (value, end) = self.value(line, &label(&name))?;
                return Ok(Token {
                    name,
                    value: Some(value),
                    end,
                });
            }
            if name.len() == MAX_STR_LEN - 1 {
                return Err(Self::fail(
                    line,
                    label(&name),
                    format!("Error : name {} too long (max {MAX_STR_LEN})", text(&name)),
                    "src/graph/xml.cc:93",
                ));
            }
            if matches!(c, b' ' | b'>' | b'/' | b'\n' | b'\r') {
                return Ok(Token {
                    name,
                    value: None,
                    end: c,
                });
            }
            name.push(c);
        }
    }

    /// `xmlSkipComment`: up to and with the next `-->`.
    fn skip_comment(&mut self, start: &[u8], next: u8, line: u32) -> Result<(), SyntaxError> {
        fn shift(c: u8, end: &mut [u8; 3]) {
            end.rotate_left(1);
            end[2] = c;
        }
        let mut end = *b"...";
        for &c in start.iter().chain(std::iter::once(&next)) {
            shift(c, &mut end);
        }
        while &end != b"-->" {
            let c = self.byte().ok_or_else(|| {
                Self::fail(
                    line,
                    "<!--".into(),
                    "XML Parse error : unterminated comment".into(),
                    "src/graph/xml.cc:118",
                )
            })?;
            shift(c, &mut end);
        }
        Ok(())
    }

    /// `xmlGetNode`: the next tag, comments skipped; None at the end.
    fn tag(&mut self, around: &str) -> Result<Option<Tag>, SyntaxError> {
        loop {
            let mut c = b' ';
            while matches!(c, b' ' | b'\n' | b'\r') {
                match self.byte() {
                    None => return Ok(None),
                    Some(b) => c = b,
                }
            }
            let line = self.line;
            if c != b'<' {
                return Err(Self::fail(
                    line,
                    around.into(),
                    format!("XML Parse error : expecting '<', got '{}'", shown(c)),
                    "src/graph/xml.cc:133",
                ));
            }
            let Token {
                name, end: mut c, ..
            } = self.token(false, line, None)?;
            if name.starts_with(b"!--") {
                self.skip_comment(&name[3..], c, line)?;
                continue;
            }
            let node = format!("<{}>", text(&name));
            if name.is_empty() && c == b'/' {
                let Token { name, end: c, .. } = self.token(false, line, Some("</"))?;
                if c != b'>' {
                    return Err(Self::fail(
                        line,
                        format!("</{}>", text(&name)),
                        format!(
                            "XML Parse error : unexpected trailing {} in closing tag {}",
                            shown(c),
                            text(&name)
                        ),
                        "src/graph/xml.cc:151",
                    ));
                }
                return Ok(Some(Tag {
                    name: text(&name),
                    attrs: Vec::new(),
                    dropped: Vec::new(),
                    close: true,
                    single: false,
                    line,
                }));
            }
            let mut attrs = Vec::new();
            let mut dropped = Vec::new();
            while c == b' ' {
                let Token {
                    name: key,
                    value,
                    end: last,
                } = self.token(true, line, Some(&node))?;
                if attrs.len() == MAX_ATTR_COUNT {
                    dropped.push(text(&key));
                } else {
                    attrs.push((text(&key), text(&value.unwrap_or_default())));
                }
                c = last;
            }
            let single = c == b'/';
            if single {
                c = self.token(false, line, Some(&node))?.end;
            }
            if c != b'>' {
                return Err(Self::fail(
                    line,
                    node,
                    format!("XML Parse : expected >, got '{}'", shown(c)),
                    "src/graph/xml.cc:175",
                ));
            }
            return Ok(Some(Tag {
                name: text(&name),
                attrs,
                dropped,
                close: false,
                single,
                line,
            }));
        }
    }

    fn label(&self, frame: Frame) -> String {
        match frame {
            Frame::Top => "(top level)".into(),
            Frame::Kept(i) => format!("in <{}>", self.elements[i].name),
            Frame::Skipped => "in an element NCCL skips".into(),
        }
    }

    /// `xmlLoadSub` from the top, without recursion (skipped elements nest
    /// without limit).
    fn load(&mut self) -> Result<(), SyntaxError> {
        let mut stack = vec![Frame::Top];
        while let Some(&frame) = stack.last() {
            let around = self.label(frame);
            if self.elements.len() == MAX_NODES {
                return Err(Self::fail(
                    self.line,
                    around,
                    format!("Error : XML parser is limited to {MAX_NODES} nodes"),
                    "src/graph/xml.cc:192",
                ));
            }
            let Some(tag) = self.tag(&around)? else {
                return match frame {
                    Frame::Top => Ok(()),
                    Frame::Kept(i) => Err(Self::fail(
                        self.line,
                        around,
                        format!("XML Parse : unterminated {}", self.elements[i].name),
                        "src/graph/xml.cc:200",
                    )),
                    Frame::Skipped => Err(Self::fail(
                        self.line,
                        around,
                        "XML Parse : unterminated ".into(),
                        "src/graph/xml.cc:200",
                    )),
                };
            };
            match frame {
                Frame::Kept(i) if tag.close => {
                    if tag.name != self.elements[i].name {
                        return Err(Self::fail(
                            tag.line,
                            format!("</{}>", tag.name),
                            format!("XML Mismatch : {} / {}", self.elements[i].name, tag.name),
                            "src/graph/xml.cc:209",
                        ));
                    }
                    stack.pop();
                    continue;
                }
                Frame::Skipped if tag.close => {
                    stack.pop();
                    continue;
                }
                _ => {}
            }
            // At the top level a closing tag is read as an element of that name.
            let parent = match frame {
                Frame::Kept(i) => Some(i),
                _ => None,
            };
            let parent_name = parent.map(|p| self.elements[p].name.as_str());
            let keeps = match frame {
                Frame::Skipped => false,
                _ => handled(parent_name, &tag.name),
            };
            if !keeps {
                if !tag.single {
                    stack.push(Frame::Skipped);
                }
                continue;
            }
            if let Some(p) = parent {
                if self.elements[p].children.len() == MAX_SUBS {
                    return Err(Self::fail(
                        tag.line,
                        format!("<{}>", tag.name),
                        format!("Error : XML parser is limited to {MAX_SUBS} subnodes"),
                        "src/graph/xml.cc:219",
                    ));
                }
            }
            let id = self.elements.len();
            self.elements.push(Element {
                name: tag.name,
                attrs: tag.attrs,
                dropped: tag.dropped,
                line: tag.line,
                parent,
                children: Vec::new(),
            });
            if let Some(p) = parent {
                self.elements[p].children.push(id);
            }
            if !tag.single {
                stack.push(Frame::Kept(id));
            }
        }
        Ok(())
    }
}

/// Reads `text` as NCCL 2.28.3 reads a topology file.
pub(super) fn read(text: &str) -> Read {
    let mut r = Reader {
        bytes: text.as_bytes(),
        pos: 0,
        line: 1,
        elements: Vec::new(),
    };
    let error = r.load().err();
    Read {
        elements: r.elements,
        error,
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
