//! Reading /proc and sysfs files whole, in as few read(2) calls as they
//! allow: no stat or seek for a size hint (they give none), and a task's
//! one-piece files (written whole by the kernel at the first read) in one.
//! Part of the Host (DROPS §4.1: the manager reads the machine's state).

use std::path::Path;

/// Everything left in `f`, the first read(2) `first` bytes long, doubling
/// after: no stat or seek for a size hint (which /proc and sysfs do not
/// give), so a control file costs one read and the read of its end.
pub(crate) fn read_whole(f: &mut impl std::io::Read, first: usize) -> std::io::Result<Vec<u8>> {
    read_whole_until(f, first, false)
}

/// `read_whole`; with `short_is_end`, a read shorter than asked ends it
/// without the read of the end: right for a file the kernel shows in one
/// piece (`one_piece`), not for others (a seq_file of many records may
/// stop a read short at a page's end).
fn read_whole_until(
    f: &mut impl std::io::Read,
    first: usize,
    short_is_end: bool,
) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; first.max(1)];
    let mut n = 0;
    loop {
        let asked = buf.len() - n;
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) if short_is_end && k < asked => {
                n += k;
                break;
            }
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if n == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// A task's file the kernel writes whole at each read's first call
/// (`single_open`: stat, schedstat, sched, cgroup, cpuset, status, under
/// /proc/PID or /proc/PID/task/TID): a read(2) that returns less than it
/// asked for has returned all of it.
pub(crate) fn one_piece(abs: &Path) -> bool {
    one_piece_of(abs).is_some()
}

/// The task whose one-piece file (`one_piece`) `abs` is: PID, or TID under
/// /proc/PID/task.
pub(crate) fn one_piece_of(abs: &Path) -> Option<u32> {
    let mut parts = abs
        .components()
        .map(|c| c.as_os_str().to_str().unwrap_or(""));
    let number = |s: &str| {
        s.parse::<u32>()
            .ok()
            .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
    };
    if parts.next() != Some("/") || parts.next() != Some("proc") {
        return None;
    }
    let mut task = parts.next().and_then(number)?;
    let mut rest: Vec<&str> = parts.collect();
    if rest.len() == 3 && rest[0] == "task" {
        task = number(rest[1])?;
        rest.drain(..2);
    }
    matches!(
        rest[..],
        ["stat" | "schedstat" | "sched" | "cgroup" | "cpuset" | "status"]
    )
    .then_some(task)
}

/// A one-piece file (`one_piece`) read again through a descriptor held
/// open: pread(2) from 0, which makes the kernel write it afresh; one call
/// when it fits in 4 KiB.
pub(crate) fn read_again(f: &std::fs::File) -> std::io::Result<Vec<u8>> {
    read_whole_until(&mut FromStart(f, 0), 4096, true)
}

/// A file read with pread(2) from offset 0, each read where the last ended.
struct FromStart<'a>(&'a std::fs::File, u64);

impl std::io::Read for FromStart<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.0.read_at(buf, self.1)?;
        self.1 += n as u64;
        Ok(n)
    }
}

/// A file's bytes as text (InvalidData when they are not UTF-8).
pub(crate) fn into_text(buf: Vec<u8>) -> std::io::Result<String> {
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// A whole file, into a 4 KiB buffer first; a task's one-piece file
/// (`one_piece`) in one read(2) when it fits.
pub(crate) fn read_file(real: &Path, abs: &Path) -> std::io::Result<Vec<u8>> {
    read_whole_until(&mut std::fs::File::open(real)?, 4096, one_piece(abs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives a few bytes at a time, and is interrupted once.
    struct Trickle<'a>(&'a [u8], bool);

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if !self.1 {
                self.1 = true;
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = self.0.len().min(out.len()).min(7);
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_task_s_one_piece_files_are_told_from_the_others() {
        for yes in [
            "/proc/12/stat",
            "/proc/12/task/13/schedstat",
            "/proc/1/sched",
            "/proc/9/cgroup",
            "/proc/9/task/9/status",
        ] {
            assert!(one_piece(Path::new(yes)), "{yes}");
        }
        for no in [
            "/proc/self/stat",
            "/proc/12/maps",
            "/proc/12/task/13",
            "/proc/12/task/x/stat",
            "/proc/interrupts",
            "/sys/fs/cgroup/cpuset/tasks",
            "proc/12/stat",
            "/proc/12/task/13/stat/x",
        ] {
            assert!(!one_piece(Path::new(no)), "{no}");
        }
    }

    /// A one-piece read stops at its first short read (it does not ask for
    /// the end); any other goes on to the end.
    #[test]
    fn only_a_one_piece_read_ends_at_a_short_read() {
        let text: Vec<u8> = (0..100u8).collect();
        let once = read_whole_until(&mut Trickle(&text, true), 4096, true).unwrap();
        assert_eq!(once, text[..7]);
        assert_eq!(
            read_whole_until(&mut Trickle(&text, true), 4096, false).unwrap(),
            text
        );
        // Filling its buffer is not short: 7 of 7, 7 of 7 (doubled to 14),
        // then 7 of 14 ends it.
        assert_eq!(
            read_whole_until(&mut Trickle(&text, true), 7, true).unwrap(),
            text[..21]
        );
    }

    /// On this machine: a task's files read in one piece are what a plain
    /// read gives, a 4 KiB one too, and cost one read(2) each (`syscr`).
    #[test]
    fn a_task_s_files_read_in_one_piece_are_whole() {
        let me = std::process::id();
        for name in ["stat", "schedstat", "sched", "cgroup", "status"] {
            let abs = format!("/proc/{me}/{name}");
            let ours = read_file(Path::new(&abs), Path::new(&abs)).unwrap();
            let theirs = std::fs::read(&abs).unwrap();
            // Counters move between the two reads; the lines do not.
            assert_eq!(
                ours.iter().filter(|&&b| b == b'\n').count(),
                theirs.iter().filter(|&&b| b == b'\n').count(),
                "{abs}"
            );
            assert!(!ours.is_empty() && ours.ends_with(b"\n"), "{abs}");
        }
        // This thread's read(2) calls so far, in one read(2) of its own
        // (the kernel counts a read after it returns).
        let syscr = || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            let n = std::fs::File::open("/proc/thread-self/io")
                .unwrap()
                .read(&mut buf)
                .unwrap();
            std::str::from_utf8(&buf[..n])
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("syscr: ").map(|v| v.parse::<u64>().unwrap()))
                .unwrap()
        };
        let abs = format!("/proc/{me}/task/{}/stat", rtmgr_sys::sched::gettid());
        let before = syscr();
        read_file(Path::new(&abs), Path::new(&abs)).unwrap();
        // The first probe's own read, and one for the file.
        assert_eq!(syscr() - before, 2, "one read(2) for {abs}");
    }

    #[test]
    fn a_whole_file_is_read_past_its_first_buffer_and_through_an_interruption() {
        let text: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        for first in [0, 1, 16, 4096, 1 << 16] {
            assert_eq!(read_whole(&mut Trickle(&text, false), first).unwrap(), text);
        }
        assert!(read_whole(&mut Trickle(b"", true), 4096)
            .unwrap()
            .is_empty());
    }
}
