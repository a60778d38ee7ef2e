//! Result files, all or nothing.
//!
//! A run writes its results into a staging directory of its own inside the output directory
//! (a fresh, unpredictable name created with create-new semantics, so two runs never share a
//! temporary file and no symbolic link is ever followed). Only when the run succeeds are the
//! staged files moved into place, each by an atomic rename; an earlier file of the same name
//! is kept aside as a hard link first, so if any rename fails every file already moved is put
//! back and the directory is as it was. While a run holds an output directory it holds an
//! exclusive lock on it: a second run into the same directory is refused with a clear error,
//! and a run that finds staging directories there knows they belong to runs that were killed,
//! and removes them.
//!
//! The commit itself is recoverable: before its first rename a run writes, inside its staging
//! directory, a journal naming every file of the set (written aside and renamed, so it is
//! whole or absent). A run killed between its renames leaves that journal behind, and the
//! next command to open the directory finishes the commit — moves the rest of the set into
//! place — before anything else, so a new `requests.csv` never stays beside an old
//! `summary.json`. Without a journal a staging directory was never committed and is removed.
//!
//! Files this run does not write are never touched: an earlier `requests.csv` stays when this
//! run has `requests_csv: false` (the caller is told, see [`OutputDir::earlier_files`]).

use std::fs::{self, File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// Names of the staging directories (followed by a random suffix).
const STAGING_PREFIX: &str = ".servesim-run-";
/// The commit journal inside a staging directory: the names of the files to move, one a line.
const JOURNAL: &str = ".servesim-commit";

/// Every result file name `run` and `check-real` write into a run's directory.
pub const RESULT_FILES: [&str; 8] = [
    "requests.csv",
    "decisions.csv",
    "summary.json",
    "scale_events.csv",
    "timeseries.csv",
    "timeline.json",
    "report.html",
    "check-real.json",
];

/// A run's result files: each concern creates its own while the run is set up
/// ([`create`](Self::create)) and finishes them when it ends; the driver then commits them
/// all together. The output directory is opened (and locked) by the first file created, so
/// a run that writes nothing never touches it.
#[derive(bevy_ecs::prelude::Resource, Default)]
pub struct Outputs {
    /// Where results go; `None` writes no file.
    dir: Option<PathBuf>,
    opened: Option<OutputDir>,
    /// Files the run reads (field path, canonical path): a result never replaces one.
    inputs: Vec<(String, PathBuf)>,
}

impl Outputs {
    /// Results into `dir` (none without one); `inputs` are the files the run reads, by
    /// field path.
    pub fn new(dir: Option<PathBuf>, inputs: Vec<(String, PathBuf)>) -> Self {
        let inputs = inputs
            .into_iter()
            .filter_map(|(field, p)| Some((field, fs::canonicalize(p).ok()?)))
            .collect();
        Outputs {
            dir,
            opened: None,
            inputs,
        }
    }

    /// Creates the staged result file `name`; `None` when the run writes no files. Refuses a
    /// name that would replace a file the run reads (a trace in the output directory, say).
    pub fn create(&mut self, name: &str) -> Result<Option<BufWriter<File>>, OutputError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        if let Ok(target) = fs::canonicalize(dir.join(name))
            && let Some((field, _)) = self.inputs.iter().find(|(_, p)| *p == target)
        {
            return Err(OutputError::Unusable(format!(
                "{} is an input of this run ({field}) and would be replaced by its {name}; \
                 give --out another directory (or move the input)",
                dir.join(name).display()
            )));
        }
        if self.opened.is_none() {
            self.opened = Some(OutputDir::open_for(dir, Results::Run)?);
        }
        let out = self.opened.as_mut().expect("opened above");
        out.create(name).map(Some)
    }

    /// Where `name` is written until it is committed.
    pub fn staged_path(&self, name: &str) -> PathBuf {
        match (&self.opened, &self.dir) {
            (Some(out), _) => out.staged_path(name),
            (None, Some(dir)) => dir.join(name),
            (None, None) => PathBuf::from(name),
        }
    }

    /// The opened output directory with this run's staged files, to commit or drop.
    pub fn take(&mut self) -> Option<OutputDir> {
        self.opened.take()
    }
}

/// Why an output directory cannot be used or its results could not be committed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The directory cannot be used (checked before anything is simulated).
    #[error("{0}")]
    Unusable(String),
    /// Writing a file failed; nothing in the directory was changed.
    #[error("cannot write {path}: {message}")]
    Write { path: PathBuf, message: String },
    /// Moving the results into place failed and every change was undone.
    #[error(
        "cannot move the results into place ({path}: {message}); every result file was put back as it was"
    )]
    RolledBack { path: PathBuf, message: String },
    /// Moving the results into place failed and not every change could be undone.
    #[error(
        "cannot move the results into place ({path}: {message}), and putting back the earlier files failed too: {unrestored}"
    )]
    Mixed {
        path: PathBuf,
        message: String,
        unrestored: String,
    },
}

impl OutputError {
    /// True when the output directory holds exactly what it held before the run.
    pub fn directory_unchanged(&self) -> bool {
        !matches!(self, OutputError::Mixed { .. })
    }
}

/// An output directory held by one run: locked, with a private staging directory.
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    /// The directory opened for reading, holding the exclusive lock until dropped.
    lock: File,
    staging: Option<tempfile::TempDir>,
    /// Files staged so far, in creation order.
    staged: Vec<String>,
    /// Leftovers of killed runs removed when the directory was opened.
    cleaned: Vec<String>,
    /// Files of a run killed while committing that were moved into place when the directory
    /// was opened.
    completed: Vec<String>,
    /// The directories `open` created, deepest first: a run that ends without committing
    /// removes them again if they are still empty, so a refused run leaves no trace.
    created: Vec<PathBuf>,
    committed: bool,
}

/// What a command writes into its output directory. A directory holds one command's
/// results: `servesim report` reads one kind per directory, and two kinds side by side would
/// be shown as one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Results {
    /// `run` (and `check-real`, which writes `check-real.json` beside a run's results).
    Run,
    Sweep,
    Plan,
    Capacity,
    /// A policy search's trials (`servesim.report.write_search`, Python).
    Search,
}

impl Results {
    const ALL: [Results; 5] = [
        Results::Run,
        Results::Sweep,
        Results::Plan,
        Results::Capacity,
        Results::Search,
    ];

    /// What the command's results are called: "a sweep's results".
    pub fn name(self) -> &'static str {
        match self {
            Results::Run => "run",
            Results::Sweep => "sweep",
            Results::Plan => "plan",
            Results::Capacity => "capacity search",
            Results::Search => "policy search",
        }
    }

    /// The files that say a directory holds this kind of result (`report.html` belongs to
    /// any; a plan's progress file is its own).
    fn files(self) -> &'static [&'static str] {
        match self {
            Results::Run => &RESULT_FILES,
            Results::Sweep => &["sweep.csv", "sweep.json", "sweep-points.csv"],
            Results::Plan => &["plan.csv", "pareto.csv", "plan.json"],
            Results::Capacity => &["capacity.json"],
            Results::Search => &["search.csv", "search.json"],
        }
    }

    /// The kind of results `dir` holds and the files that say so (the first kind found).
    pub fn held_in(dir: &Path) -> Option<(Results, Vec<&'static str>)> {
        Results::ALL.into_iter().find_map(|kind| {
            let found = kind.found_in(dir);
            (!found.is_empty()).then_some((kind, found))
        })
    }

    /// This kind's files (`report.html` aside) present in `dir`.
    fn found_in(self, dir: &Path) -> Vec<&'static str> {
        self.files()
            .iter()
            .copied()
            .filter(|f| *f != "report.html" && fs::symlink_metadata(dir.join(f)).is_ok())
            .collect()
    }

    /// `dir` holds no other command's results.
    pub fn check_unmixed(self, dir: &Path) -> Result<(), OutputError> {
        for other in Results::ALL.into_iter().filter(|o| *o != self) {
            let found = other.found_in(dir);
            if !found.is_empty() {
                return Err(OutputError::Unusable(format!(
                    "{} holds a {}'s results ({}); this {}'s would be mixed with them (and `servesim \
                     report` would show one of the two): give --out another directory",
                    dir.display(),
                    other.name(),
                    found.join(", "),
                    self.name()
                )));
            }
        }
        Ok(())
    }
}

impl OutputDir {
    /// [`open`](Self::open) for `kind`'s results: refused when `dir` holds another command's.
    pub fn open_for(dir: &Path, kind: Results) -> Result<Self, OutputError> {
        kind.check_unmixed(dir)?;
        Self::open(dir)
    }

    /// Creates `dir` if needed, locks it and removes what killed runs left in it.
    pub fn open(dir: &Path) -> Result<Self, OutputError> {
        check_dir(dir)?;
        let created = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && fs::symlink_metadata(d).is_err())
            .map(Path::to_path_buf)
            .collect();
        fs::create_dir_all(dir).map_err(|e| {
            OutputError::Unusable(format!(
                "cannot create output directory {}: {e}",
                dir.display()
            ))
        })?;
        let unusable = |e: std::io::Error| {
            OutputError::Unusable(format!(
                "cannot use output directory {}: {e}",
                dir.display()
            ))
        };
        let lock = File::open(dir).map_err(unusable)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(OutputError::Unusable(format!(
                    "another servesim run is writing its results to {} right now; wait for it \
                     to finish or give this run another --out",
                    dir.display()
                )));
            }
            Err(fs::TryLockError::Error(e)) => return Err(unusable(e)),
        }
        let (cleaned, completed) = remove_leftovers(dir);
        // The staging directory is made now, so a directory this run cannot write to (its
        // permissions, a read-only file system) is refused before anything is simulated.
        let staging = tempfile::Builder::new()
            .prefix(STAGING_PREFIX)
            .tempdir_in(dir)
            .map_err(|e| {
                OutputError::Unusable(format!(
                    "cannot write to output directory {}: {e}; give --out a directory you can write to",
                    dir.display()
                ))
            })?;
        Ok(OutputDir {
            dir: dir.to_path_buf(),
            lock,
            staging: Some(staging),
            staged: Vec::new(),
            cleaned,
            completed,
            created,
            committed: false,
        })
    }

    /// The directory results go to.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Leftovers of killed runs (staging directories, old `.partial` files) removed on open.
    pub fn cleaned(&self) -> &[String] {
        &self.cleaned
    }

    /// Files of a run killed in the middle of its commit that opening the directory moved into
    /// place (finishing that commit).
    pub fn completed(&self) -> &[String] {
        &self.completed
    }

    /// What opening the directory tidied, as sentences for the user (none when nothing).
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.completed.is_empty() {
            notes.push(format!(
                "finished the commit of a run killed while moving its results into {}: {} moved into place",
                self.dir.display(),
                self.completed.join(", ")
            ));
        }
        if !self.cleaned.is_empty() {
            notes.push(format!(
                "removed what killed runs left in {}: {}",
                self.dir.display(),
                self.cleaned.join(", ")
            ));
        }
        notes
    }

    /// Result files already in the directory that this run has not written (so far): after
    /// a commit they are from an earlier run.
    pub fn earlier_files(&self) -> Vec<String> {
        RESULT_FILES
            .iter()
            .filter(|n| !self.staged.iter().any(|s| s == *n))
            .filter(|n| fs::symlink_metadata(self.dir.join(n)).is_ok())
            .map(|n| n.to_string())
            .collect()
    }

    /// Where `name` goes when committed.
    pub fn final_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Where `name` is written until it is committed.
    pub fn staged_path(&self, name: &str) -> PathBuf {
        match &self.staging {
            Some(s) => s.path().join(name),
            None => self.dir.join(format!("{STAGING_PREFIX}…")).join(name),
        }
    }

    /// Creates the staged file `name` for writing (a new file: never an existing one or a link).
    pub fn create(&mut self, name: &str) -> Result<BufWriter<File>, OutputError> {
        let write = |path: PathBuf, e: std::io::Error| OutputError::Write {
            path,
            message: e.to_string(),
        };
        let path = self.staged_path(name);
        if name == JOURNAL || name.ends_with(".earlier") {
            return Err(write(
                path,
                std::io::Error::other("that name is reserved for servesim's commit"),
            ));
        }
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| write(path.clone(), e))?;
        self.staged.push(name.to_string());
        Ok(BufWriter::with_capacity(1 << 16, file))
    }

    /// Moves every staged file into place, all or nothing; returns their names. Dropping an
    /// `OutputDir` without committing removes the staged files.
    pub fn commit(self) -> Result<Vec<String>, OutputError> {
        self.commit_until(usize::MAX)
    }

    /// [`commit`](Self::commit), stopping as if killed after `renames` renames (tests).
    fn commit_until(mut self, renames: usize) -> Result<Vec<String>, OutputError> {
        let Some(staging) = self.staging.take() else {
            return Ok(Vec::new());
        };
        if self.staged.is_empty() {
            // Nothing to move: the directory stays as the user asked for it.
            self.committed = true;
            return Ok(Vec::new());
        }
        let journal = staging.path().join(JOURNAL);
        write_journal(&journal, &self.staged).map_err(|e| OutputError::Write {
            path: journal.clone(),
            message: e.to_string(),
        })?;
        // (name, an earlier file kept aside) for each file moved so far.
        let mut moved: Vec<(&str, Option<PathBuf>)> = Vec::new();
        let mut failure = None;
        for (k, name) in self.staged.iter().enumerate() {
            if k == renames {
                // Killed here: the staging directory and its journal stay behind.
                let _ = staging.keep();
                return Ok(Vec::new());
            }
            let target = self.dir.join(name);
            let backup = staging.path().join(format!("{name}.earlier"));
            let kept = match fs::symlink_metadata(&target) {
                Err(_) => None,
                Ok(m) if m.is_dir() => {
                    let e = std::io::Error::other("a directory of that name is in the way");
                    failure = Some((target, e));
                    break;
                }
                Ok(_) => match fs::hard_link(&target, &backup) {
                    Ok(()) => Some(backup),
                    // A file system without hard links: move it aside instead.
                    Err(_) => match fs::rename(&target, &backup) {
                        Ok(()) => Some(backup),
                        Err(e) => {
                            failure = Some((target, e));
                            break;
                        }
                    },
                },
            };
            if let Err(e) = fs::rename(staging.path().join(name), &target) {
                if let Some(b) = &kept {
                    // Undo a move aside (a hard link left the target where it was).
                    let _ = fs::rename(b, &target).or_else(|_| fs::hard_link(b, &target));
                }
                failure = Some((target, e));
                break;
            }
            moved.push((name, kept));
        }
        let _ = self.lock.sync_all();
        let Some((path, e)) = failure else {
            self.committed = true;
            return Ok(std::mem::take(&mut self.staged));
        };
        // Undoing: the journal goes first, so that a kill while undoing is not finished by
        // the next run as a commit.
        let _ = fs::remove_file(&journal);
        let mut unrestored = Vec::new();
        for (name, kept) in moved.iter().rev() {
            let target = self.dir.join(name);
            let undone = match kept {
                Some(b) => fs::rename(b, &target),
                None => fs::remove_file(&target),
            };
            if let Err(e) = undone {
                unrestored.push(format!("{}: {e}", target.display()));
            }
        }
        let _ = self.lock.sync_all();
        let message = e.to_string();
        if unrestored.is_empty() {
            Err(OutputError::RolledBack { path, message })
        } else {
            Err(OutputError::Mixed {
                path,
                message,
                unrestored: unrestored.join("; "),
            })
        }
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        // The staged files go first, with their staging directory (a commit killed on purpose
        // in tests keeps it), then each directory this run created, while it is empty.
        drop(self.staging.take());
        for d in &self.created {
            if fs::remove_dir(d).is_err() {
                break;
            }
        }
    }
}

/// An output directory that exists must be a directory (following links); say what is
/// wrong otherwise instead of an OS error about creating it.
pub fn check_dir(dir: &Path) -> Result<(), OutputError> {
    if fs::symlink_metadata(dir).is_err() {
        return Ok(()); // nothing there yet: it will be created
    }
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(OutputError::Unusable(format!(
            "output directory {} exists and is not a directory; give --out a directory",
            dir.display()
        ))),
        Err(e) => Err(OutputError::Unusable(format!(
            "output directory {} cannot be used: {e} (a broken or looping symbolic link?)",
            dir.display()
        ))),
    }
}

/// For a command about to read results in `dir` (`report`, `merge`): finishes a commit that a
/// run killed between its renames left half done, taking the directory's lock to do it, so
/// the files read are one run's. Touches nothing when there is none. Returns what was done,
/// as sentences for the user.
pub fn finish_interrupted_commit(dir: &Path) -> Result<Vec<String>, OutputError> {
    let journaled = fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with(STAGING_PREFIX)
            && fs::symlink_metadata(e.path().join(JOURNAL)).is_ok()
    });
    if !journaled {
        return Ok(Vec::new());
    }
    Ok(OutputDir::open(dir)?.notes())
}

/// Writes the commit journal whole or not at all: aside, then renamed.
fn write_journal(path: &Path, names: &[String]) -> std::io::Result<()> {
    use std::io::Write;
    let aside = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&aside)?;
    f.write_all(names.join("\n").as_bytes())?;
    drop(f);
    fs::rename(&aside, path)
}

/// Finishes the commit a killed run journaled in `staging`: moves every file of the set still
/// staged into place. Returns the files moved.
fn finish_commit(dir: &Path, staging: &Path) -> Vec<String> {
    let Ok(text) = fs::read_to_string(staging.join(JOURNAL)) else {
        return Vec::new();
    };
    let mut moved = Vec::new();
    for name in text.lines() {
        // Only plain file names of the set, never a path or a link.
        let plain = Path::new(name).file_name().is_some_and(|n| n == name)
            && name != JOURNAL
            && !name.starts_with(STAGING_PREFIX);
        let staged = staging.join(name);
        let is_file = fs::symlink_metadata(&staged).is_ok_and(|m| m.is_file());
        if plain && is_file && fs::rename(&staged, dir.join(name)).is_ok() {
            moved.push(name.to_string());
        }
    }
    moved
}

/// Removes staging directories of killed runs (the caller holds the lock, so no live run
/// owns one) after finishing any commit one of them journaled, and `.NAME.partial` files of
/// versions before staging directories. Returns (removed, moved into place).
fn remove_leftovers(dir: &Path) -> (Vec<String>, Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return (Vec::new(), Vec::new());
    };
    let partials: Vec<String> = RESULT_FILES
        .iter()
        .map(|n| format!(".{n}.partial"))
        .collect();
    let mut removed = Vec::new();
    let mut completed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_staging = name.starts_with(STAGING_PREFIX);
        if !is_staging && !partials.contains(&name) {
            continue;
        }
        let path = entry.path();
        // Never follows a link: a link is removed itself.
        let gone = match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {
                completed.extend(finish_commit(dir, &path));
                fs::remove_dir_all(&path)
            }
            Ok(_) => fs::remove_file(&path),
            Err(e) => Err(e),
        };
        if gone.is_ok() {
            removed.push(name);
        }
    }
    removed.sort();
    (removed, completed)
}

/// A result file written as the run goes: what it takes to get its bytes to disk.
pub trait StreamedFile {
    /// Flushes the buffers; the file, to sync.
    fn into_file(self) -> Result<File, String>;
}

impl StreamedFile for BufWriter<File> {
    fn into_file(self) -> Result<File, String> {
        self.into_inner().map_err(|e| e.to_string())
    }
}

impl StreamedFile for csv::Writer<BufWriter<File>> {
    fn into_file(self) -> Result<File, String> {
        self.into_inner().map_err(|e| e.to_string())?.into_file()
    }
}

/// Finishes a streamed result file at the end of a run: its first write error if it had one,
/// else its buffers flushed and its bytes synced to disk (what a commit relies on). Nothing
/// to do for a file that was not written (`writer` none).
pub fn finish_streamed(
    writer: Option<impl StreamedFile>,
    error: Option<String>,
) -> Result<(), String> {
    if let Some(err) = error {
        return Err(err);
    }
    match writer {
        Some(w) => w.into_file()?.sync_all().map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

/// A byte buffer several owners can read after the run.
#[derive(Clone, Debug, Default)]
pub struct SharedBuffer(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("buffer poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(out: &mut OutputDir, name: &str, text: &str) {
        let mut w = out.create(name).unwrap();
        w.write_all(text.as_bytes()).unwrap();
        w.flush().unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_run_that_does_not_commit_removes_the_directories_it_created_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/out");
        let mut out = OutputDir::open(&dir).unwrap();
        write(&mut out, "summary.json", "never committed");
        drop(out);
        assert!(names(tmp.path()).is_empty(), "{:?}", names(tmp.path()));
        // A directory that was there before stays, empty or not.
        fs::create_dir(tmp.path().join("kept")).unwrap();
        drop(OutputDir::open(&tmp.path().join("kept")).unwrap());
        assert_eq!(names(tmp.path()), vec!["kept".to_string()]);
        // A directory this run created but another process wrote into stays too.
        let out = OutputDir::open(&tmp.path().join("shared")).unwrap();
        fs::write(tmp.path().join("shared/theirs.txt"), "x").unwrap();
        drop(out);
        assert_eq!(
            names(&tmp.path().join("shared")),
            vec!["theirs.txt".to_string()]
        );
        // A committed run's directory stays, even with nothing to commit.
        let out = OutputDir::open(&tmp.path().join("empty")).unwrap();
        assert!(out.commit().unwrap().is_empty());
        assert!(tmp.path().join("empty").is_dir());
    }

    #[test]
    fn a_commit_replaces_written_files_and_leaves_the_others() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("requests.csv"), "old rows").unwrap();
        fs::write(tmp.path().join("summary.json"), "old summary").unwrap();
        let mut out = OutputDir::open(tmp.path()).unwrap();
        write(&mut out, "summary.json", "new summary");
        assert_eq!(out.earlier_files(), vec!["requests.csv".to_string()]);
        assert_eq!(out.commit().unwrap(), vec!["summary.json".to_string()]);
        let read = |n: &str| fs::read_to_string(tmp.path().join(n)).unwrap();
        assert_eq!(read("summary.json"), "new summary");
        assert_eq!(read("requests.csv"), "old rows");
        assert_eq!(names(tmp.path()), ["requests.csv", "summary.json"]);
    }

    #[test]
    fn a_second_holder_of_the_directory_is_refused_until_the_first_is_done() {
        let tmp = tempfile::tempdir().unwrap();
        let mut first = OutputDir::open(tmp.path()).unwrap();
        write(&mut first, "summary.json", "first");
        let err = OutputDir::open(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("another servesim run is writing"), "{err}");
        first.commit().unwrap();
        let second = OutputDir::open(tmp.path()).unwrap();
        assert!(second.cleaned().is_empty());
    }

    #[test]
    fn an_uncommitted_run_leaves_nothing_and_a_killed_runs_staging_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let mut out = OutputDir::open(tmp.path()).unwrap();
        write(&mut out, "requests.csv", "rows");
        drop(out);
        assert!(names(tmp.path()).is_empty());
        // What a killed run leaves: a staging directory and an old-style partial.
        fs::create_dir(tmp.path().join(".servesim-run-abc123")).unwrap();
        fs::write(tmp.path().join(".servesim-run-abc123/requests.csv"), "x").unwrap();
        fs::write(tmp.path().join(".requests.csv.partial"), "x").unwrap();
        fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
        let out = OutputDir::open(tmp.path()).unwrap();
        assert_eq!(
            out.cleaned(),
            [".requests.csv.partial", ".servesim-run-abc123"]
        );
        drop(out); // and its own (empty) staging directory
        assert_eq!(names(tmp.path()), ["notes.txt"]);
    }

    #[test]
    fn a_failed_rename_puts_every_earlier_file_back() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("requests.csv"), "old rows").unwrap();
        // summary.json is a non-empty directory: renaming a file over it fails.
        fs::create_dir(tmp.path().join("summary.json")).unwrap();
        fs::write(tmp.path().join("summary.json/keep"), "k").unwrap();
        let mut out = OutputDir::open(tmp.path()).unwrap();
        write(&mut out, "decisions.csv", "new decisions");
        write(&mut out, "requests.csv", "new rows");
        write(&mut out, "summary.json", "new summary");
        let err = out.commit().unwrap_err();
        assert!(err.directory_unchanged(), "{err}");
        assert!(err.to_string().contains("summary.json"), "{err}");
        assert_eq!(
            fs::read_to_string(tmp.path().join("requests.csv")).unwrap(),
            "old rows"
        );
        assert_eq!(names(tmp.path()), ["requests.csv", "summary.json"]);
    }

    #[test]
    fn a_commit_killed_between_its_renames_is_finished_by_the_next_open() {
        // Killed before the first rename, after the first, and not killed (both renamed).
        for killed_after in 0..3 {
            let tmp = tempfile::tempdir().unwrap();
            fs::write(tmp.path().join("requests.csv"), "old rows").unwrap();
            fs::write(tmp.path().join("summary.json"), "old summary").unwrap();
            fs::write(tmp.path().join("timeseries.csv"), "old series").unwrap();
            let mut out = OutputDir::open(tmp.path()).unwrap();
            write(&mut out, "requests.csv", "new rows");
            write(&mut out, "summary.json", "new summary");
            out.commit_until(killed_after).unwrap();
            let read = |n: &str| fs::read_to_string(tmp.path().join(n)).unwrap();
            // Killed after one rename: new rows beside the old summary, until the next open.
            if killed_after == 1 {
                assert_eq!(read("requests.csv"), "new rows");
                assert_eq!(read("summary.json"), "old summary");
            }
            let notes = finish_interrupted_commit(tmp.path()).unwrap();
            if killed_after == 2 {
                assert!(notes.is_empty(), "a whole commit leaves nothing: {notes:?}");
            } else {
                let moved = ["requests.csv", "summary.json"][killed_after..].join(", ");
                assert_eq!(notes.len(), 2, "{notes:?}");
                assert!(notes[0].contains(&moved), "{notes:?}");
            }
            assert_eq!(
                read("requests.csv"),
                "new rows",
                "killed after {killed_after}"
            );
            assert_eq!(
                read("summary.json"),
                "new summary",
                "killed after {killed_after}"
            );
            assert_eq!(
                read("timeseries.csv"),
                "old series",
                "not in the set: untouched"
            );
            assert_eq!(
                names(tmp.path()),
                ["requests.csv", "summary.json", "timeseries.csv"]
            );
            // Nothing left to finish: a second look touches nothing.
            assert!(finish_interrupted_commit(tmp.path()).unwrap().is_empty());
        }
    }

    #[test]
    fn a_staging_directory_without_a_journal_is_never_moved_into_place() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("summary.json"), "old summary").unwrap();
        let staging = tmp.path().join(".servesim-run-x1");
        fs::create_dir(&staging).unwrap();
        fs::write(staging.join("summary.json"), "half-written").unwrap();
        assert!(finish_interrupted_commit(tmp.path()).unwrap().is_empty());
        let out = OutputDir::open(tmp.path()).unwrap();
        assert!(out.completed().is_empty());
        assert_eq!(out.cleaned(), [".servesim-run-x1"]);
        assert_eq!(
            fs::read_to_string(tmp.path().join("summary.json")).unwrap(),
            "old summary"
        );
        // A journal naming a path outside the directory moves nothing there.
        let staging = tmp.path().join(".servesim-run-x2");
        fs::create_dir(&staging).unwrap();
        fs::write(staging.join(JOURNAL), "../escape\nsummary.json").unwrap();
        drop(out);
        let out = OutputDir::open(tmp.path()).unwrap();
        assert!(out.completed().is_empty(), "{:?}", out.completed());
        drop(out);
        assert_eq!(names(tmp.path()), ["summary.json"]);
    }

    #[cfg(unix)]
    #[test]
    fn links_are_replaced_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let dir = tmp.path().join("out");
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("requests.csv")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(".requests.csv.partial")).unwrap();
        let mut out = OutputDir::open(&dir).unwrap();
        write(&mut out, "requests.csv", "rows");
        out.commit().unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(
            fs::read_to_string(dir.join("requests.csv")).unwrap(),
            "rows"
        );
        assert!(
            !fs::symlink_metadata(dir.join("requests.csv"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(names(&dir), ["requests.csv"]);
    }
}
