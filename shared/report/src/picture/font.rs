//! Text measurement for the pictures: the advance widths of the one font
//! family every picture names (DejaVu Sans, Debian's `fonts-dejavu-core`),
//! so boxes are sized to their text and no two texts overlap when a
//! renderer draws them with that font.
//!
//! The table was read from `/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`
//! (fonts-dejavu-core 2.37, the `hmtx` advance of each character's glyph)
//! with ttf-parser; `tests/tests/project/pictures/` reads the font again and fails
//! when an entry differs (`VP2P_WRITE_FONT_TABLE=1` rewrites this file's
//! table from the font).

/// The font family every picture's text names.
pub const FONT_FAMILY: &str = "DejaVu Sans";

/// Font units per em of DejaVu Sans (`head.unitsPerEm`).
pub const UNITS_PER_EM: u16 = 2048;

/// Ascender of DejaVu Sans in font units (`hhea.ascender`).
pub const ASCENDER: i16 = 1901;

/// Descender of DejaVu Sans in font units (`hhea.descender`, negative).
pub const DESCENDER: i16 = -483;

/// Width of a character the table lacks: the widest advance of the font's
/// Latin glyphs, so an unknown character is over-estimated, never under.
const FALLBACK_ADVANCE: u16 = 2048;

/// Advance width (font units) of every character the pictures write.
#[rustfmt::skip]
pub const ADVANCES: &[(char, u16)] = &[
    // generated: begin
    (' ', 651), ('!', 821), ('"', 942), ('#', 1716), ('$', 1303), ('%', 1946), ('&', 1597), ('\'', 563),
    ('(', 799), (')', 799), ('*', 1024), ('+', 1716), (',', 651), ('-', 739), ('.', 651), ('/', 690),
    ('0', 1303), ('1', 1303), ('2', 1303), ('3', 1303), ('4', 1303), ('5', 1303), ('6', 1303), ('7', 1303),
    ('8', 1303), ('9', 1303), (':', 690), (';', 690), ('<', 1716), ('=', 1716), ('>', 1716), ('?', 1087),
    ('@', 2048), ('A', 1401), ('B', 1405), ('C', 1430), ('D', 1577), ('E', 1294), ('F', 1178), ('G', 1587),
    ('H', 1540), ('I', 604), ('J', 604), ('K', 1343), ('L', 1141), ('M', 1767), ('N', 1532), ('O', 1612),
    ('P', 1235), ('Q', 1612), ('R', 1423), ('S', 1300), ('T', 1251), ('U', 1499), ('V', 1401), ('W', 2025),
    ('X', 1403), ('Y', 1251), ('Z', 1403), ('[', 799), ('\\', 690), (']', 799), ('^', 1716), ('_', 1024),
    ('`', 1024), ('a', 1255), ('b', 1300), ('c', 1126), ('d', 1300), ('e', 1260), ('f', 721), ('g', 1300),
    ('h', 1298), ('i', 569), ('j', 569), ('k', 1186), ('l', 569), ('m', 1995), ('n', 1298), ('o', 1253),
    ('p', 1300), ('q', 1300), ('r', 842), ('s', 1067), ('t', 803), ('u', 1298), ('v', 1212), ('w', 1675),
    ('x', 1212), ('y', 1212), ('z', 1075), ('{', 1303), ('|', 690), ('}', 1303), ('~', 1716), ('µ', 1303),
    ('·', 651), ('×', 1716), ('→', 1716), ('–', 1024), ('…', 2048), ('≥', 1716), ('≤', 1716), ('←', 1716),
    ('↔', 1716),
    // generated: end
];

fn advance(c: char) -> u16 {
    ADVANCES
        .iter()
        .find(|(k, _)| *k == c)
        .map_or(FALLBACK_ADVANCE, |(_, a)| *a)
}

/// Width in pixels of `text` at `size` pixels per em, from the advances
/// alone. Kerning (which the renderer applies) only narrows DejaVu's Latin
/// pairs, so this errs wide; 2% and half a pixel more cover rounding.
pub fn text_width(text: &str, size: f64) -> f64 {
    let units: u32 = text.chars().map(|c| u32::from(advance(c))).sum();
    f64::from(units) / f64::from(UNITS_PER_EM) * size * 1.02 + 0.5
}

/// Height of one line of text at `size`: ascender to descender, plus a
/// fifth of an em of air between lines.
pub fn line_height(size: f64) -> f64 {
    let em = f64::from(ASCENDER - DESCENDER) / f64::from(UNITS_PER_EM);
    size * (em + 0.2)
}

/// Distance from a line's top to its baseline at `size`.
pub fn baseline(size: f64) -> f64 {
    size * (f64::from(ASCENDER) / f64::from(UNITS_PER_EM) + 0.1)
}

/// Splits `text` into lines no wider than `max` pixels at `size`, at
/// spaces; a word wider than `max` stays whole on its own line.
pub fn wrap(text: &str, size: f64, max: f64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        let cand = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if !cur.is_empty() && text_width(&cand, size) > max {
            lines.push(std::mem::take(&mut cur));
            cur = word.to_string();
        } else {
            cur = cand;
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_add_advances_and_unknown_characters_err_wide() {
        // "00" is two digit advances of 1303/2048 em: 1.2725 em at 10 px.
        let w = text_width("00", 10.0);
        assert!((w - (2.0 * 1303.0 / 2048.0 * 10.0 * 1.02 + 0.5)).abs() < 1e-9);
        // A CJK character is not in the table: counted a full em.
        assert!(text_width("\u{4e00}", 10.0) >= 10.0);
    }

    #[test]
    fn wrap_keeps_lines_under_the_width() {
        let text = "the quick brown fox jumps over the lazy dog again and again";
        let lines = wrap(text, 12.0, 120.0);
        assert!(lines.len() > 2);
        for l in &lines {
            assert!(text_width(l, 12.0) <= 120.0, "{l}");
        }
        assert_eq!(lines.join(" "), text);
    }
}
