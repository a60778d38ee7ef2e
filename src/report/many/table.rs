//! What the pages of many runs share: a whole CSV file, a JSON file, and table cells.

use std::path::Path;

use serde_json::Value;

use super::super::chart::esc;
use super::super::page::{ReportError, read_err, read_err_plain};

/// Rows shown in one table at most (the files hold them all).
pub(super) const MAX_TABLE_ROWS: usize = 2000;

/// A whole CSV file: its header and rows.
pub(super) struct Table {
    pub(super) header: Vec<String>,
    pub(super) rows: Vec<Vec<String>>,
}

impl Table {
    pub(super) fn read(path: &Path) -> Result<Table, ReportError> {
        let mut reader = csv::Reader::from_reader(
            crate::input::open_lines(path).map_err(|e| read_err_plain(path, e))?,
        );
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| read_err(path, e))?
            .iter()
            .map(String::from)
            .collect();
        let mut rows = Vec::new();
        for r in reader.records() {
            let r = r.map_err(|e| read_err(path, e))?;
            rows.push(r.iter().map(String::from).collect());
        }
        Ok(Table { header, rows })
    }

    pub(super) fn col(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    pub(super) fn need(&self, path: &Path, name: &str) -> Result<usize, ReportError> {
        self.col(name).ok_or_else(|| {
            read_err(
                path,
                format!("no `{name}` column (is it a servesim result file?)"),
            )
        })
    }
}

pub(super) fn read_json(path: &Path) -> Result<Value, ReportError> {
    let text = crate::input::read_text(path).map_err(|e| read_err_plain(path, e))?;
    serde_json::from_str(&text).map_err(|e| read_err(path, e))
}

/// A number as a table shows it: empty for none, integers as they are, else 3 decimals
/// (1 from 100 on).
pub(super) fn cell(v: &str) -> String {
    match v.parse::<f64>() {
        Ok(x) if v.contains('.') || v.contains('e') => {
            if x.abs() >= 100.0 {
                format!("{x:.1}")
            } else {
                format!("{x:.3}")
            }
        }
        _ if v.is_empty() => "–".into(),
        _ => esc(v),
    }
}

/// Shows a table's first rows; says where the rest are.
pub(super) fn more_rows(s: &mut String, n: usize, file: &str) {
    use std::fmt::Write;
    if n > MAX_TABLE_ROWS {
        let _ = write!(
            s,
            r#"<p class="note">The first {MAX_TABLE_ROWS} of {n} rows; every row is in {file}.</p>"#
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_round_decimals_and_keep_integers_and_text() {
        assert_eq!(cell("42"), "42");
        assert_eq!(cell("3.14159"), "3.142");
        assert_eq!(cell("1234.56"), "1234.6");
        assert_eq!(cell(""), "–");
        assert_eq!(cell("a<b"), "a&lt;b");
    }
}
