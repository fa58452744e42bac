//! The pty master as a plain file descriptor: what a terminal keeps of its pty after spawning.
//!
//! `portable-pty` opens the pty and spawns the program; its master object cannot be rebuilt
//! from a raw descriptor, which a live upgrade must do (the new image inherits the descriptor
//! across `execve`). So right after spawning, the master is duplicated into a [`PtyMaster`] and
//! portable-pty's object is dropped. portable-pty's writer is never taken: its `Drop` writes
//! `"\n"` and VEOF (^D) to the pty, which would end the shell's input.
//! Touches only the descriptor it owns.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The master side of a pseudo-terminal, owned (closed on drop, close-on-exec).
#[derive(Debug)]
pub struct PtyMaster(OwnedFd);

impl PtyMaster {
    /// A close-on-exec duplicate of the master descriptor `fd` (which stays the caller's).
    pub fn dup_from(fd: RawFd) -> io::Result<PtyMaster> {
        // SAFETY: fcntl on a descriptor the caller vouches for; the result is checked and
        // owned at once.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `dup` is a fresh descriptor nobody else owns.
        Ok(PtyMaster(unsafe { OwnedFd::from_raw_fd(dup) }))
    }

    /// Takes ownership of an inherited descriptor after checking that it is a pty master
    /// (`TIOCGPTN`). Errors: not a pty master (`ENOTTY`), or a bad descriptor (`EBADF`).
    pub fn adopt(fd: OwnedFd) -> io::Result<PtyMaster> {
        let mut n: libc::c_uint = 0;
        // SAFETY: TIOCGPTN writes one unsigned int.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGPTN, &mut n) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PtyMaster(fd))
    }

    /// A close-on-exec duplicate of this master (for the hand-over of a live upgrade).
    pub fn try_clone(&self) -> io::Result<OwnedFd> {
        Ok(PtyMaster::dup_from(self.0.as_raw_fd())?.0)
    }

    /// Makes reads and writes on this master (and on every duplicate of it: the flag belongs
    /// to the open file) return `EWOULDBLOCK` instead of blocking.
    pub fn set_nonblocking(&self) -> io::Result<()> {
        // SAFETY: fcntl flag calls on the descriptor we own; results are checked.
        unsafe {
            let flags = libc::fcntl(self.0.as_raw_fd(), libc::F_GETFL);
            if flags < 0
                || libc::fcntl(self.0.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Sets the window size (`TIOCSWINSZ`); the pty's foreground process group gets SIGWINCH.
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize struct.
        if unsafe { libc::ioctl(self.0.as_raw_fd(), libc::TIOCSWINSZ, &size) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsRawFd for PtyMaster {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl AsFd for PtyMaster {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_resizes_the_pty_and_adopt_accepts_only_a_master() {
        let pair = portable_pty::native_pty_system()
            .openpty(portable_pty::PtySize::default())
            .unwrap();
        let master = PtyMaster::dup_from(pair.master.as_raw_fd().unwrap()).unwrap();
        drop(pair.master);
        master.resize(123, 45).unwrap();
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) },
            0
        );
        assert_eq!((ws.ws_col, ws.ws_row), (123, 45));
        let adopted = PtyMaster::adopt(master.try_clone().unwrap()).unwrap();
        adopted.resize(80, 24).unwrap();
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(PtyMaster::adopt(OwnedFd::from(file)).is_err());
    }
}
