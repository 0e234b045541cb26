//! The started servers: each a child process logging to a file, killed when dropped; together
//! with the temporary directory they live in, which goes when they have stopped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use crate::Error;

/// A server process whose stdout and stderr go to `log`. Killed (and reaped) when dropped.
#[derive(Debug)]
pub(crate) struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `program` with `args` as `name`, logging to `NAME.log` in `dir`.
    pub(crate) fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        dir: &Path,
    ) -> Result<Self, Error> {
        let log = dir.join(format!("{name}.log"));
        let io = |source| Error::Io {
            action: format!("create {}", log.display()),
            source,
        };
        let stdout = File::create(&log).map_err(io)?;
        let stderr = stdout.try_clone().map_err(io)?;
        let child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|source| Error::Spawn {
                binary: program.to_owned(),
                source,
            })?;
        Ok(Self { name, child, log })
    }

    /// Its exit status, if it has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// [`Error::Start`] for this process: `what` happened; with the end of its log.
    pub(crate) fn failure(&self, what: String) -> Error {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        Error::Start {
            process: self.name,
            what,
            log: self.log.clone(),
            tail,
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // SIGKILL: the data dies with the directory, nothing needs a clean shutdown.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The temporary directory of one cluster and the processes started in it. Dropping it stops
/// them, the last started first, then removes the directory (unless told to keep it).
#[derive(Debug)]
pub(crate) struct Servers {
    dir: PathBuf,
    processes: Vec<Process>,
    keep: bool,
}

impl Servers {
    /// A fresh, empty, private directory `dir` (replacing any leftover of that name).
    pub(crate) fn new(dir: PathBuf) -> Result<Self, Error> {
        let io = |source| Error::Io {
            action: format!("create the directory {}", dir.display()),
            source,
        };
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io)?;
        }
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).map_err(io)?;
        Ok(Self {
            dir,
            processes: Vec::new(),
            keep: false,
        })
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts `program` as `name` in the directory (see [`Process::spawn`]).
    pub(crate) fn spawn(
        &mut self,
        name: &'static str,
        program: &Path,
        args: &[String],
    ) -> Result<(), Error> {
        let process = Process::spawn(name, program, args, &self.dir)?;
        self.processes.push(process);
        Ok(())
    }

    /// Keeps the directory when dropped (the processes still stop): for the logs of a start
    /// that failed.
    pub(crate) fn keep(&mut self) {
        self.keep = true;
    }

    /// [`Error::Start`] for the first process that has exited, if one has.
    pub(crate) fn exited(&mut self) -> Option<Error> {
        self.processes.iter_mut().find_map(|p| {
            let status = p.exited()?;
            Some(p.failure(format!("exited ({status})")))
        })
    }

    /// [`Error::Start`] for the last process started (the one waited for): `what` happened.
    pub(crate) fn failure(&self, what: String) -> Option<Error> {
        Some(self.processes.last()?.failure(what))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        while let Some(process) = self.processes.pop() {
            drop(process);
        }
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
