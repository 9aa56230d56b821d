//! What a watched process (the gateway) spent during a measurement, from Linux's `/proc`.
//!
//! The CPU time of the process (all its threads, user + system) read before and after a measurement tells
//! how busy its core was and how many CPU microseconds one request costs it. When the target is pinned to
//! one core and its utilisation stays below 100%, the load generator side was the bottleneck, and
//! `1 s / (CPU time per request)` bounds what the target would sustain on that core.
//!
//! The CPU time of every other process on the machine is the load of everything else (other users' builds,
//! say): the noise indicator of each measurement. It is summed over `/proc/*/stat` with the children's
//! times (`cutime`, `cstime`) of each process, so a short-lived compiler process that starts and ends
//! between the two readings is still counted, in its parent's children time. (The machine-wide `/proc/stat`
//! would be simpler but is sampled at the timer tick, which a periodic load like the open loop can alias
//! with.) Steal time (a virtual machine's CPU taken by the host) is reported beside it.

use anyhow::Context;

/// Linux reports `utime`/`stime` in clock ticks of `USER_HZ`, 100 on every mainstream architecture.
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds used so far by process `pid` (all threads): in user space and in the kernel.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<Cpu> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("no process {pid}"))?;
    parse_cpu_seconds(&stat).with_context(|| format!("unexpected /proc/{pid}/stat"))
}

/// CPU seconds of one process, by where they were spent. Their sum is exact (the kernel scales it to the
/// scheduler's own runtime); the split between them is sampled at the timer tick, so it is sound where the
/// process keeps its core busy, and can alias with a periodic load that leaves it mostly idle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cpu {
    /// In user space (`utime`).
    pub user: f64,
    /// In the kernel on the process's behalf (`stime`): system calls, and the network stack's work for them.
    pub system: f64,
}

impl Cpu {
    /// User and system together.
    pub fn total(self) -> f64 {
        self.user + self.system
    }

    /// What was used between `self` and the later reading `after`.
    pub fn until(self, after: Cpu) -> Cpu {
        Cpu { user: after.user - self.user, system: after.system - self.system }
    }
}

fn parse_cpu_seconds(stat: &str) -> Option<Cpu> {
    Some(Cpu { user: stat_fields(stat, 0, 1)?, system: stat_fields(stat, 1, 1)? })
}

/// The sum of `n` time fields from `utime` on, `skip` of them skipped first: utime(0), stime(1), cutime(2)
/// and cstime(3) (the times of the process's children that ended and were waited for), in seconds.
fn stat_fields(stat: &str, skip: usize, n: usize) -> Option<f64> {
    // The command name is in parentheses and may contain spaces: fields are counted after the last `)`.
    // After it: state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17).
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut total = 0.0;
    for field in rest.split_whitespace().skip(11 + skip).take(n) {
        total += field.parse::<f64>().ok()?;
    }
    Some(total / TICKS_PER_SECOND)
}

/// CPU seconds used so far by every user-space process except `exclude`, children's times included. The
/// difference of two readings is what the other processes used in between (see the module docs). Kernel
/// threads are left out: their work (disk writeback, network) is mostly done for the benchmark itself.
pub fn others_seconds(exclude: &[u32]) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for entry in std::fs::read_dir("/proc").context("cannot list /proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if exclude.contains(&pid) {
            continue;
        }
        // A process may end between the listing and the read: it then counts in its parent's children time.
        if let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) {
            if pid != KTHREADD && parent(&stat) != Some(KTHREADD) {
                total += stat_fields(&stat, 0, 4).unwrap_or(0.0);
            }
        }
    }
    Ok(total)
}

/// The parent of every kernel thread.
const KTHREADD: u32 = 2;

fn parent(stat: &str) -> Option<u32> {
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// Machine-wide steal time (CPU the hypervisor gave to others), seconds, from `/proc/stat`.
pub fn steal_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?;
    parse_steal_seconds(&stat).context("unexpected /proc/stat")
}

fn parse_steal_seconds(stat: &str) -> Option<f64> {
    // cpu user nice system idle iowait irq softirq steal guest guest_nice
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let steal: f64 = line.split_whitespace().nth(7)?.parse().ok()?;
    Some(steal / TICKS_PER_SECOND)
}

/// A `kB` line of `/proc/PID/status`, e.g. `VmHWM` (peak resident set) or `VmRSS`, in KiB.
pub fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("no process {pid}"))?;
    parse_status_kib(&status, field).with_context(|| format!("no `{field}` in /proc/{pid}/status"))
}

fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        if name != field {
            return None;
        }
        value.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_after_a_name_with_spaces() {
        let stat = "1234 (svc (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 3 0";
        assert_eq!(parse_cpu_seconds(stat), Some(Cpu { user: 2.5, system: 0.5 }));
    }

    #[test]
    fn children_times() {
        let stat = "1234 (cargo) S 1 2 3 4 5 6 7 8 9 10 250 50 700 100 20 0 3 0";
        assert_eq!(stat_fields(stat, 0, 4), Some(11.0));
        assert_eq!(parent(stat), Some(1));
    }

    #[test]
    fn steal() {
        let stat = "cpu  1000 10 200 5000 30 0 90 7 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_steal_seconds(stat), Some(0.07));
        assert_eq!(parse_steal_seconds("cpu0 1 2\n"), None);
    }

    #[test]
    fn status_fields() {
        let status = "Name:\tsvc\nVmPeak:\t  100 kB\nVmHWM:\t   20480 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM"), Some(20480));
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(1000));
        assert_eq!(parse_status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn this_process_is_readable() -> anyhow::Result<()> {
        let me = std::process::id();
        assert!(cpu_seconds(me)?.total() >= 0.0);
        assert!(status_kib(me, "VmHWM")? > 0);
        assert!(steal_seconds()? >= 0.0);
        assert!(others_seconds(&[me])? > 0.0);
        Ok(())
    }
}
