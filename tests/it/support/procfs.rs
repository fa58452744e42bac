//! What `/proc` says about a process: its state, session, CPU time, memory, descriptors,
//! children and command line. (The tests look at the daemon and at the programs in its
//! terminals from the outside; nothing here is shared with the daemon's own code.)

use std::collections::HashMap;
use std::time::Duration;

use super::{eventually, eventually_blocking};

/// The fields of `/proc/<pid>/stat` after the command name: `state(0) ppid(1) pgrp(2)
/// session(3) … utime(11) stime(12) …`. `None` once the process is gone.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// `Some(state letter)` of a live /proc entry, `None` when gone.
pub fn proc_state(pid: i32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// Gone or a zombie.
pub fn is_dead(pid: i32) -> bool {
    matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

/// The session id of `pid`.
pub fn session_of(pid: i32) -> Option<i32> {
    stat_fields(pid)?.get(3)?.parse().ok()
}

/// utime + stime of `pid`, in clock ticks; `None` once it is gone.
pub fn cpu_ticks(pid: i32) -> Option<u64> {
    let f = stat_fields(pid)?;
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// CPU ticks `pid` uses over the next `window` (sampling a counter over a window is the
/// measurement itself, not a wait for an event).
pub async fn cpu_over(pid: i32, window: Duration) -> u64 {
    let before = cpu_ticks(pid).unwrap_or(0);
    tokio::time::sleep(window).await;
    cpu_ticks(pid).unwrap_or(0).saturating_sub(before)
}

/// A `/proc/<pid>/status` value in KiB (`VmRSS`, `VmHWM`, …); 0 when gone.
pub fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Resident set size of `pid` in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// Resident set size of `pid` in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    rss_kib(pid) * 1024
}

/// How many descriptors `pid` has open (0 when gone).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Descriptors of `pid` open on the master of pty number `index` (`/dev/pts/<index>`).
pub fn pty_master_fds(pid: u32, index: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l == std::path::Path::new("/dev/ptmx"))
        })
        .filter(|e| {
            let info = format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy());
            std::fs::read_to_string(info).is_ok_and(|s| {
                s.lines()
                    .any(|l| l.split_whitespace().eq(["tty-index:", &index.to_string()]))
            })
        })
        .count()
}

/// The open-file limit of `pid` (`Max open files` of /proc/PID/limits): (soft, hard).
pub fn nofile(pid: &str) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].to_string(), f[4].to_string())
}

/// Pids of every live process.
pub fn proc_pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
}

/// Direct children of `pid` (a daemon's: its terminals' programs).
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// Live (non-zombie) processes whose session id is `sid`.
pub fn session_members(sid: i32) -> Vec<i32> {
    proc_pids()
        .filter(|&pid| {
            stat_fields(pid).is_some_and(|f| {
                f.len() > 3 && f[0] != "Z" && f[3].parse::<i32>().ok() == Some(sid)
            })
        })
        .collect()
}

/// The command name of `pid` (`/proc/<pid>/comm`).
pub fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string())
}

/// The command line of `pid`, arguments joined by spaces.
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// Pids of the processes named `name` among the descendants of `root`.
pub fn descendants_named(root: u32, name: &str) -> Vec<i32> {
    descendants(root, |_, n| n == name)
}

/// Pids of the live descendants of `root` for which `pick(pid, command name)` holds.
pub fn descendants(root: u32, mut pick: impl FnMut(i32, &str) -> bool) -> Vec<i32> {
    let mut parent = HashMap::new();
    let mut names = HashMap::new();
    for pid in proc_pids() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(0);
        parent.insert(pid, ppid);
        names.insert(pid, stat[open + 1..close].to_string());
    }
    let descends = |mut p: i32| {
        for _ in 0..16 {
            match parent.get(&p) {
                Some(&pp) if pp == root as i32 => return true,
                Some(&pp) if pp > 1 => p = pp,
                _ => return false,
            }
        }
        false
    };
    names
        .iter()
        .filter(|(pid, n)| descends(**pid) && pick(**pid, n))
        .map(|(pid, _)| *pid)
        .collect()
}

/// Waits for exactly one descendant of `root` (a daemon: its terminals' programs) whose
/// command line contains `needle`. (Only descendants: other test suites on the machine run
/// the same commands.)
pub async fn wait_pid_of(root: u32, needle: &str, timeout: Duration) -> i32 {
    eventually(
        &format!("a single process with {needle:?} in its command line"),
        timeout,
        async || match descendants(root, |pid, _| cmdline(pid).contains(needle))[..] {
            [pid] => Ok(pid),
            ref pids => Err(format!("{pids:?}")),
        },
    )
    .await
}

/// Waits until every pid is gone or a zombie; panics naming the survivors.
pub fn wait_dead(pids: &[i32], timeout: Duration, what: &str) {
    eventually_blocking(&format!("{what} to end"), timeout, || {
        let alive: Vec<(i32, Option<char>, String)> = pids
            .iter()
            .filter(|&&p| !is_dead(p))
            .map(|&p| (p, proc_state(p), cmdline(p)))
            .collect();
        if alive.is_empty() {
            Ok(())
        } else {
            Err(format!("still alive: {alive:?}"))
        }
    })
}
