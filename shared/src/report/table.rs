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

    /// Renders the table; trailing spaces are trimmed from every line.
    pub fn render(&self) -> String {
        let ncol = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut width = vec![0usize; ncol];
        for row in &self.rows {
            for (i, c) in row.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            let mut line = " ".repeat(self.indent);
            for (i, c) in row.iter().enumerate() {
                line.push_str(c);
                if i + 1 < row.len() {
                    let pad = width[i] - c.chars().count() + 2;
                    line.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
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
}
