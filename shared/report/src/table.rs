//! Plain-text tables with aligned columns, shared by every report's text form.

/// A table of left-aligned columns separated by two spaces.
#[derive(Debug, Clone, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
    indent: usize,
}

impl Table {
    /// A table whose first row is `header`.
    pub fn new<I, S>(header: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            rows: vec![header.into_iter().map(Into::into).collect()],
            indent: 0,
        }
    }

    /// Indents every line by `n` spaces.
    pub fn indent(mut self, n: usize) -> Self {
        self.indent = n;
        self
    }

    /// Appends a data row below the header, one string per column.
    pub fn row<I, S>(&mut self, cells: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    /// Number of data rows, the header not counted.
    pub fn len(&self) -> usize {
        self.rows.len() - 1
    }

    /// True when only the header row is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Renders the table; trailing spaces are trimmed from every line. A
    /// cell longer than [`MAX_CELL`] wraps at spaces onto continuation lines
    /// (a single word longer than that is cut with `...`), so one long value
    /// never widens every row; the JSON of a report keeps the whole value.
    pub fn render(&self) -> String {
        let wrapped: Vec<Vec<Vec<String>>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(|c| wrap(c, MAX_CELL)).collect())
            .collect();
        let ncol = wrapped.iter().map(Vec::len).max().unwrap_or(0);
        let mut width = vec![0usize; ncol];
        for row in &wrapped {
            for (i, lines) in row.iter().enumerate() {
                for l in lines {
                    width[i] = width[i].max(l.chars().count());
                }
            }
        }
        let mut out = String::new();
        for row in &wrapped {
            let height = row.iter().map(Vec::len).max().unwrap_or(1).max(1);
            for k in 0..height {
                let mut line = " ".repeat(self.indent);
                for (i, lines) in row.iter().enumerate() {
                    let c = lines.get(k).map_or("", String::as_str);
                    line.push_str(c);
                    if i + 1 < row.len() {
                        let pad = width[i] - c.chars().count() + 2;
                        line.push_str(&" ".repeat(pad));
                    }
                }
                out.push_str(line.trim_end());
                out.push('\n');
            }
        }
        out
    }
}

/// Widest a table cell is printed, in characters.
pub const MAX_CELL: usize = 64;

/// `text` in lines of at most `max` characters, broken at spaces; a word
/// longer than `max` is cut to `max` with `...` at its end.
fn wrap(text: &str, max: usize) -> Vec<String> {
    if text.chars().count() <= max {
        return vec![text.to_string()];
    }
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let word: String = if word.chars().count() > max {
            let kept: String = word.chars().take(max.saturating_sub(3)).collect();
            format!("{kept}...")
        } else {
            word.to_string()
        };
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut t = Table::new(["A", "LONGER"]);
        t.row(["xyz", "1"]);
        assert_eq!(t.render(), "A    LONGER\nxyz  1\n");
    }

    #[test]
    fn a_long_cell_wraps_at_spaces_and_a_long_word_is_cut() {
        let long = "the large BAR should be 64-bit prefetchable so the VM can map it above 4 GiB";
        let mut t = Table::new(["A", "B", "C"]);
        t.row(["x", long, "end"]);
        let text = t.render();
        // Derived by hand: greedy at 64 characters, the next cell keeps its
        // column, continuation lines leave the other cells blank.
        // Column B is 64 wide (the first line is exactly 64 characters), so
        // the header's B is followed by 63 + 2 spaces.
        let expected = format!(
            "A  B{}C\nx  the large BAR should be 64-bit prefetchable so the VM can map it  end\n   above 4 GiB\n",
            " ".repeat(65)
        );
        assert_eq!(text, expected);
        assert!(text
            .lines()
            .all(|l| l.chars().count() <= 3 + MAX_CELL + 2 + 3));
        let word = "a".repeat(100);
        assert_eq!(wrap(&word, 10), ["aaaaaaa..."]);
        assert_eq!(wrap("short", 10), ["short"]);
    }
}
