//! Taking `$AHPTY_TOKEN` out of the process: out of the environment children inherit, and out
//! of the process's own environment block, which any program of the same user reads as
//! `/proc/PID/environ` (so any program running in one of the daemon's terminals could).
//!
//! `/proc/PID/environ` shows the bytes between the kernel's `env_start` and `env_end`: the
//! block `execve` wrote on the new stack, whatever the process did to its environment
//! since. `unsetenv` only drops a pointer from libc's `environ` array, so the token's bytes
//! stay there. At start-up, before anything else changed the environment, the pointers of
//! `environ` point into that very block: writing zeros over the token's value through them
//! erases it where `/proc` reads it (`AHPTY_TOKEN=` and as many NULs as the token had
//! bytes remain). The alternative, executing the binary again without the variable and
//! handing the token over a pipe, costs an `execve` at every start, must not lose the
//! live-upgrade hand-over that arrives in the environment too, and is more to get wrong; the
//! overwrite is a loop over memory the process owns.
//!
//! A live upgrade does not bring the token back: the new image is executed with the
//! environment as it is then (without the variable) and gets the token in the hand-over.
//!
//! Touches the process's environment only, and only before any thread exists.

use std::ffi::CStr;

use crate::config::TOKEN_ENV;

/// Takes `$AHPTY_TOKEN` out of the process: returns its value (`None` if unset or not UTF-8),
/// erases it from the environment block `/proc/PID/environ` shows and removes the variable,
/// so no child inherits it.
///
/// # Safety
///
/// Call it at the very start of `main`, before any thread exists and before anything else has
/// read or changed the environment: it writes through libc's `environ` array.
pub unsafe fn take_token() -> Option<String> {
    let value = std::env::var(TOKEN_ENV).ok();
    // SAFETY: the caller guarantees no other thread touches the environment.
    unsafe { erase_values(TOKEN_ENV) };
    // Removes every entry of that name from `environ` (no other thread reads it, as above).
    std::env::remove_var(TOKEN_ENV);
    value
}

/// Overwrites with NULs the value of every `NAME=value` entry of `environ` (a parent may pass
/// a name twice). The entries are NUL-terminated strings the process may write: at start-up
/// they lie in the block `execve` built on the stack; an entry `setenv` made lies on the heap.
///
/// # Safety
///
/// No other thread may read or change the environment meanwhile.
unsafe fn erase_values(name: &str) {
    // SAFETY: `environ` is a NULL-terminated array of NUL-terminated strings, or NULL; nothing
    // else touches it meanwhile (the caller's promise).
    unsafe {
        let mut entry = libc::environ;
        if entry.is_null() {
            return;
        }
        while !(*entry).is_null() {
            let text = *entry;
            let bytes = CStr::from_ptr(text).to_bytes();
            let is_it = bytes.len() > name.len()
                && bytes.starts_with(name.as_bytes())
                && bytes[name.len()] == b'=';
            if is_it {
                let value_len = bytes.len() - name.len() - 1;
                std::ptr::write_bytes(text.add(name.len() + 1), 0, value_len);
            }
            entry = entry.add(1);
        }
    }
}
