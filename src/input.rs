//! Reading the files a scenario names (model configs, GPU profiles, traces, length columns,
//! measured tables, measured runs): regular files only, with bounded sizes and line lengths.
//!
//! A named pipe would block the reader forever and a character device such as `/dev/zero`
//! never ends: both are refused before a byte is read. Whole-file reads are capped, and
//! streamed files fail on a line longer than [`MAX_LINE_BYTES`] instead of buffering it.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

/// Longest line a streamed input file may have.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Largest file read whole (configs, profiles, tables, measured runs).
pub const MAX_WHOLE_FILE_BYTES: u64 = 1 << 30;

/// Refuses a CSV header that names one of the columns a reader uses twice: which of the two
/// was meant cannot be told, and taking the first would read the file silently wrong. `file`
/// starts the message, which names the column.
pub fn no_repeated_column(
    headers: &csv::StringRecord,
    used: &[&str],
    file: &str,
) -> Result<(), String> {
    match used
        .iter()
        .find(|name| headers.iter().filter(|h| h == *name).count() > 1)
    {
        Some(name) => Err(format!(
            "{file}:1: the header names column `{name}` twice; which one is meant cannot be told (columns: {})",
            headers.iter().collect::<Vec<_>>().join(", ")
        )),
        None => Ok(()),
    }
}

/// A CSV read error of `file`, as the other errors of its rows read: `file:line: …`, and a row
/// of the wrong width counted against the header (the `csv` crate's own wording compares it
/// with "the previous record" and names records and bytes).
pub fn csv_error(file: &str, e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            pos: Some(pos),
            expected_len,
            len,
        } => format!(
            "{file}:{}: {len} field{} where the header has {expected_len}",
            pos.line(),
            if *len == 1 { "" } else { "s" }
        ),
        csv::ErrorKind::Utf8 { pos: Some(pos), .. } => {
            format!("{file}:{}: not UTF-8 text", pos.line())
        }
        _ => match e.position() {
            Some(pos) => format!("{file}:{}: {e}", pos.line()),
            None => format!("{file}: {e}"),
        },
    }
}

/// Opens `path` if it is a regular file; the error says what it is otherwise.
pub fn open_regular(path: &Path) -> Result<File, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a pipe, device or socket)"
        };
        return Err(format!("cannot read {}: it is {what}", path.display()));
    }
    File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The UTF-8 byte-order mark some tools (spreadsheets, PowerShell) put before a file's text.
const BOM: &str = "\u{feff}";

/// Reads a whole regular data file of at most [`MAX_WHOLE_FILE_BYTES`] as UTF-8 text, without
/// the byte-order mark a spreadsheet may have put before it (it carries no text).
pub fn read_text(path: &Path) -> Result<String, String> {
    let text = read_text_as_written(path)?;
    Ok(match text.strip_prefix(BOM) {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

/// [`read_text`], keeping a byte-order mark (a scenario's loader says RON refuses it).
pub fn read_text_as_written(path: &Path) -> Result<String, String> {
    let file = open_regular(path)?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_WHOLE_FILE_BYTES {
        return Err(format!(
            "cannot read {}: {len} bytes is more than the {MAX_WHOLE_FILE_BYTES} allowed",
            path.display()
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_WHOLE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| not_utf8(path, e.as_bytes(), e.utf8_error()))
}

/// Where a file stops being UTF-8 text, and what it likely is instead (a UTF-16 file, as
/// Windows tools save "Unicode" text, starts with a byte-order mark of its own).
fn not_utf8(path: &Path, bytes: &[u8], e: std::str::Utf8Error) -> String {
    if bytes.starts_with(&[0xff, 0xfe]) || bytes.starts_with(&[0xfe, 0xff]) {
        return format!(
            "cannot read {}: it is UTF-16 text (it starts with UTF-16's byte-order mark); save it as UTF-8",
            path.display()
        );
    }
    let good = &bytes[..e.valid_up_to()];
    let line = 1 + good.iter().filter(|b| **b == b'\n').count();
    let column = 1 + good.iter().rev().take_while(|b| **b != b'\n').count();
    format!(
        "cannot read {}: it is not UTF-8 text (from {line}:{column} on); save it as UTF-8",
        path.display()
    )
}

/// Opens a regular file for streaming, failing on any line over [`MAX_LINE_BYTES`]; a leading
/// byte-order mark is skipped, as [`read_text`] drops it.
pub fn open_lines(path: &Path) -> Result<BufReader<LineCapped<BufReader<File>>>, String> {
    let file = open_regular(path)?;
    let mut inner = BufReader::with_capacity(1 << 16, file);
    let starts_with_bom = inner
        .fill_buf()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .starts_with(BOM.as_bytes());
    if starts_with_bom {
        inner.consume(BOM.len());
    }
    Ok(BufReader::with_capacity(
        1 << 16,
        LineCapped {
            inner,
            run: 0,
            lines: 0,
        },
    ))
}

/// A reader that fails once a line runs past [`MAX_LINE_BYTES`].
pub struct LineCapped<R> {
    inner: R,
    /// Bytes since the last newline.
    run: usize,
    /// Lines completed so far.
    lines: u64,
}

impl<R: BufRead> Read for LineCapped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            if b == b'\n' {
                self.run = 0;
                self.lines += 1;
            } else {
                self.run += 1;
                if self.run > MAX_LINE_BYTES {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "line {} is longer than {MAX_LINE_BYTES} bytes",
                            self.lines + 1
                        ),
                    ));
                }
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_and_devices_are_refused_before_reading() {
        let e = read_text(Path::new(".")).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        if Path::new("/dev/zero").exists() {
            let e = open_lines(Path::new("/dev/zero")).err().unwrap();
            assert!(e.contains("not a regular file"), "{e}");
        }
    }

    #[test]
    fn text_that_is_not_utf8_says_where_and_what_it_likely_is() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let e = read_text(&write("u16.ron", b"\xff\xfe(\x00")).unwrap_err();
        assert!(
            e.ends_with("u16.ron: it is UTF-16 text (it starts with UTF-16's byte-order mark); save it as UTF-8"),
            "{e}"
        );
        // Latin-1's é (0xe9) on line 2, after 3 characters.
        let e = read_text(&write("latin1.ron", b"(\n  n\xe9e: 1)")).unwrap_err();
        assert!(
            e.ends_with("latin1.ron: it is not UTF-8 text (from 2:4 on); save it as UTF-8"),
            "{e}"
        );
    }

    #[test]
    fn a_byte_order_mark_before_a_data_file_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, "\u{feff}a,b\n1,2\n").unwrap();
        assert_eq!(read_text(&path).unwrap(), "a,b\n1,2\n");
        assert_eq!(read_text_as_written(&path).unwrap(), "\u{feff}a,b\n1,2\n");
        let mut streamed = String::new();
        open_lines(&path)
            .unwrap()
            .read_to_string(&mut streamed)
            .unwrap();
        assert_eq!(streamed, "a,b\n1,2\n");
    }

    #[test]
    fn an_overlong_line_is_an_error_not_an_allocation() {
        let long = vec![b'x'; MAX_LINE_BYTES + 10];
        let mut r = LineCapped {
            inner: io::BufReader::new(&long[..]),
            run: 0,
            lines: 0,
        };
        let mut sink = Vec::new();
        let e = r.read_to_end(&mut sink).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let ok = b"a,b\n1,2\n".to_vec();
        let mut r = LineCapped {
            inner: io::BufReader::new(&ok[..]),
            run: 0,
            lines: 0,
        };
        let mut sink = Vec::new();
        r.read_to_end(&mut sink).unwrap();
        assert_eq!(sink, ok);
    }
}
