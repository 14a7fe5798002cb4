//! `rtmgr run --mlock` for unmodified programs (ARTiS §2.4's helper program;
//! McKenney §2.1: mlockall). The embedded LD_PRELOAD library calls mlockall()
//! in the new program. It is served from a memfd that rtmgr keeps open while
//! the program runs, so nothing is written to disk. Statically linked programs
//! ignore LD_PRELOAD: `is_static_elf` lets the caller say so.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;

static MLOCK_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/librtmgr_mlock.so"));

/// The preload library, alive while this value lives.
pub struct MlockPreload {
    file: File,
}

impl MlockPreload {
    pub fn create() -> std::io::Result<Self> {
        let mut file = File::from(rtmgr_sys::fd::memfd("rtmgr-mlock.so", false)?);
        file.write_all(MLOCK_SO)?;
        Ok(MlockPreload { file })
    }

    /// A path the dynamic loader of a child process can open.
    pub fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.file.as_raw_fd())
    }

    /// LD_PRELOAD value: ours first, then whatever the user had.
    pub fn ld_preload(&self, existing: Option<&str>) -> String {
        match existing.filter(|e| !e.is_empty()) {
            Some(e) => format!("{} {e}", self.path()),
            None => self.path(),
        }
    }
}

/// Does this ELF file have no program interpreter (statically linked)?
/// Ok(None) when it is not an ELF file (a script: its interpreter is dynamic).
pub fn is_static_elf(path: &Path) -> std::io::Result<Option<bool>> {
    let mut buf = Vec::new();
    File::open(path)?.take(64 * 1024).read_to_end(&mut buf)?;
    if buf.len() < 64 || &buf[..4] != b"\x7fELF" || buf[4] != 2 {
        return Ok(None); // not a 64-bit ELF
    }
    let u16at = |o: usize| u16::from_le_bytes([buf[o], buf[o + 1]]) as usize;
    let u64at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[o..o + 8]);
        u64::from_le_bytes(b) as usize
    };
    let (phoff, phentsize, phnum) = (u64at(32), u16at(54), u16at(56));
    for i in 0..phnum {
        let off = phoff + i * phentsize;
        if off + 4 > buf.len() {
            break;
        }
        let p_type = u32::from_le_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]);
        if p_type == 3 {
            return Ok(Some(false)); // PT_INTERP
        }
    }
    Ok(Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preloaded_program_has_locked_memory() {
        let p = MlockPreload::create().unwrap();
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg("grep VmLck /proc/$$/status")
            .env("LD_PRELOAD", p.ld_preload(None))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let kb: u64 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
        // Only root (or a large RLIMIT_MEMLOCK) can lock a whole program.
        if rtmgr_sys::process::is_root() {
            assert!(kb > 0, "memory not locked: {text}");
        } else {
            eprintln!("skip VmLck check: not root");
        }
    }

    #[test]
    fn detects_static_and_dynamic_binaries() {
        assert_eq!(is_static_elf(Path::new("/bin/sh")).unwrap(), Some(false));
        let me = std::env::current_exe().unwrap();
        assert!(is_static_elf(&me).unwrap().is_some());
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(is_static_elf(&script).unwrap(), None);
    }
}
