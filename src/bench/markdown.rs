//! Markdown tables padded to their columns' widths, so that they read as tables in a
//! terminal as well as rendered (`guirl stats`, a bench's `report.md`).

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Figures.
    Right,
}

/// A table of `header` (each with its alignment) and `rows`, one line each, every cell
/// padded to its column's width (counted in characters). A row shorter than the header
/// gets empty cells.
pub fn table(header: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let width = |i: usize| {
        let cells = rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count());
        cells.chain([header[i].0.chars().count(), 3]).max().unwrap_or(3)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: &mut dyn Iterator<Item = String>| {
        let mut s = String::from("|");
        for ((cell, w), (_, align)) in cells.zip(&widths).zip(header) {
            let pad = " ".repeat(w - cell.chars().count());
            match align {
                Align::Left => s.push_str(&format!(" {cell}{pad} |")),
                Align::Right => s.push_str(&format!(" {pad}{cell} |")),
            }
        }
        s.push('\n');
        s
    };
    let mut s = line(&mut header.iter().map(|(h, _)| h.to_string()));
    s.push_str(&line(&mut header.iter().zip(&widths).map(|((_, a), w)| match a {
        Align::Left => "-".repeat(*w),
        Align::Right => format!("{}:", "-".repeat(w - 1)),
    })));
    for r in rows {
        s.push_str(&line(&mut (0..header.len()).map(|i| r.get(i).cloned().unwrap_or_default())));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_by_characters() {
        let t = table(
            &[("task", Align::Left), ("n", Align::Right)],
            &[vec!["ä-long-name".into(), "3".into()], vec!["b".into()]],
        );
        assert_eq!(
            t,
            "| task        |   n |\n\
             | ----------- | --: |\n\
             | ä-long-name |   3 |\n\
             | b           |     |\n"
        );
    }
}
