//! Result files written atomically: each goes to a `.partial` name first and is renamed
//! only when the run succeeds (all of them together, after every one is complete), so a
//! failed run never leaves a file that looks complete.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// A file being written under a temporary name.
#[derive(Debug)]
pub struct PendingFile {
    pub final_path: PathBuf,
    pub temp_path: PathBuf,
}

impl PendingFile {
    /// Creates `dir/.name.partial` for writing (and `dir` if needed).
    pub fn create(dir: &Path, name: &str) -> std::io::Result<(Self, BufWriter<File>)> {
        fs::create_dir_all(dir)?;
        let final_path = dir.join(name);
        let temp_path = dir.join(format!(".{name}.partial"));
        let file = File::create(&temp_path)?;
        Ok((
            PendingFile {
                final_path,
                temp_path,
            },
            BufWriter::with_capacity(1 << 16, file),
        ))
    }

    /// Moves the finished file into place.
    pub fn commit(&self) -> std::io::Result<()> {
        fs::rename(&self.temp_path, &self.final_path)
    }

    /// Removes the temporary file (after a failure).
    pub fn discard(&self) {
        let _ = fs::remove_file(&self.temp_path);
    }
}
