//! A /proc file kept open and re-read with pread at offset 0 (the kernel
//! regenerates a seq_file there), and the budget of descriptors the live
//! balancer may keep. Sampling hundreds of tasks every T ms (ARTiS §2.3 on an
//! unpatched kernel) is dominated by path walks, open and close, not by reads.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// An open /proc file; `read_into` returns its current text.
#[derive(Debug)]
pub struct ProcFile {
    file: File,
}

impl ProcFile {
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(ProcFile {
            file: File::open(path)?,
        })
    }

    /// The file's current content in `buf` (cleared first). A task that
    /// exited makes this fail (ESRCH), also when its tid was reused since.
    pub fn read_into(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        loop {
            let len = buf.len();
            buf.resize(len + 4096, 0);
            match self.file.read_at(&mut buf[len..], len as u64) {
                Ok(0) => {
                    buf.truncate(len);
                    return Ok(());
                }
                Ok(n) => buf.truncate(len + n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(len),
                Err(e) => {
                    buf.truncate(len);
                    return Err(e);
                }
            }
        }
    }
}

/// How many descriptors may stay open. Beyond the budget files are opened
/// for one read and closed again (slower, never wrong).
#[derive(Debug, Clone)]
pub struct FdBudget {
    open: usize,
    max: usize,
}

impl FdBudget {
    /// Raise the soft RLIMIT_NOFILE to the hard one (this process only) and
    /// keep a quarter of it free for everything else.
    pub fn from_rlimit() -> Self {
        let limit = rtmgr_sys::process::raise_nofile_limit();
        FdBudget::new((limit.min(1 << 20) as usize) * 3 / 4)
    }

    pub fn new(max: usize) -> Self {
        FdBudget { open: 0, max }
    }

    /// Take one descriptor from the budget, if any is left.
    pub fn take(&mut self) -> bool {
        let ok = self.open < self.max;
        self.open += usize::from(ok);
        ok
    }

    pub fn give_back(&mut self) {
        self.open = self.open.saturating_sub(1);
    }

    pub fn open(&self) -> usize {
        self.open
    }
}

/// A file of one task that is kept open while the budget allows.
#[derive(Debug, Default)]
pub struct KeptFile {
    file: Option<ProcFile>,
}

impl KeptFile {
    /// Read `dir/name` into `buf`, through the kept descriptor when there is
    /// one (no path is built then); keep the descriptor afterwards if `keep`
    /// and the budget allow.
    pub fn read(
        &mut self,
        dir: &Path,
        name: &str,
        buf: &mut Vec<u8>,
        keep: bool,
        budget: &mut FdBudget,
    ) -> io::Result<()> {
        if let Some(f) = &self.file {
            let r = f.read_into(buf);
            if r.is_err() || !keep {
                self.close(budget);
            }
            return r;
        }
        let f = ProcFile::open(&dir.join(name))?;
        f.read_into(buf)?;
        if keep && budget.take() {
            self.file = Some(f);
        }
        Ok(())
    }

    pub fn close(&mut self, budget: &mut FdBudget) {
        if self.file.take().is_some() {
            budget.give_back();
        }
    }

    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pread_sees_a_rewritten_file_and_proc_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "one\n").unwrap();
        let f = ProcFile::open(&p).unwrap();
        let mut buf = Vec::new();
        f.read_into(&mut buf).unwrap();
        assert_eq!(buf, b"one\n");
        std::fs::write(&p, "second, longer\n".repeat(600)).unwrap();
        f.read_into(&mut buf).unwrap();
        assert_eq!(buf.len(), 15 * 600, "reads past one 4 KB chunk");

        // The kernel regenerates /proc files at offset 0: this thread's run
        // time grows between two reads of one descriptor.
        let tid = rtmgr_sys::sched::gettid();
        let path = format!("/proc/self/task/{tid}/schedstat");
        let Ok(f) = ProcFile::open(Path::new(&path)) else {
            eprintln!("skip the /proc half: no {path} (CONFIG_SCHED_INFO off)");
            return;
        };
        let run = |f: &ProcFile, buf: &mut Vec<u8>| -> u64 {
            f.read_into(buf).unwrap();
            let s = std::str::from_utf8(buf).unwrap();
            s.split_whitespace().next().unwrap().parse().unwrap()
        };
        let a = run(&f, &mut buf);
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_millis(5) {
            std::hint::black_box(0u64);
        }
        let b = run(&f, &mut buf);
        assert!(b > a, "run time did not grow: {a} -> {b}");
    }

    #[test]
    fn exited_thread_makes_the_kept_file_fail() {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            tx.send(rtmgr_sys::sched::gettid()).unwrap();
        });
        let tid = rx.recv().unwrap();
        let path = format!("/proc/self/task/{tid}/stat");
        let f = ProcFile::open(Path::new(&path));
        h.join().unwrap();
        let Ok(f) = f else { return }; // already gone before the open: nothing to test
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut buf = Vec::new();
        assert!(f.read_into(&mut buf).is_err() || buf.is_empty());
    }

    #[test]
    fn budget_limits_kept_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "x").unwrap();
        let mut budget = FdBudget::new(1);
        let (mut a, mut b) = (KeptFile::default(), KeptFile::default());
        let mut buf = Vec::new();
        a.read(dir.path(), "f", &mut buf, true, &mut budget)
            .unwrap();
        b.read(dir.path(), "f", &mut buf, true, &mut budget)
            .unwrap();
        assert!(a.is_open() && !b.is_open());
        assert_eq!(budget.open(), 1);
        a.read(dir.path(), "f", &mut buf, false, &mut budget)
            .unwrap();
        assert!(!a.is_open());
        assert_eq!(budget.open(), 0);
        std::fs::remove_file(&p).unwrap();
        assert!(b
            .read(dir.path(), "f", &mut buf, true, &mut budget)
            .is_err());
    }
}
