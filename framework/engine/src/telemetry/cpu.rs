//! The client's own CPU time, to tell when the client rather than the server
//! limits a run.

use std::time::Duration;

/// User plus system CPU time of this process so far, from `/proc/self/stat`
/// (Linux); `None` elsewhere or when it cannot be read.
pub fn process_cpu() -> Option<Duration> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// `utime` and `stime` of a `/proc/<pid>/stat` line, in clock ticks of the
/// kernel's fixed user-visible 100 Hz.
fn parse_stat(stat: &str) -> Option<Duration> {
    // The command name is in parentheses and may hold spaces: fields count
    // from after its closing parenthesis (field 3, the state, comes first).
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The share of the machine's cores that `cpu` over `wall` used (1.0: every
/// core busy the whole time).
pub fn share_of_cores(cpu: Duration, wall: Duration) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let wall = wall.as_secs_f64();
    if wall <= 0.0 {
        return 0.0;
    }
    cpu.as_secs_f64() / (wall * cores as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_past_a_command_name_with_spaces() {
        let line =
            "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 3 0 100 0 0";
        assert_eq!(parse_stat(line), Some(Duration::from_millis(3250)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        if cfg!(target_os = "linux") {
            let mut x = 0u64;
            for i in 0..20_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            assert!(x != 1);
            assert!(process_cpu().is_some_and(|c| c > Duration::ZERO));
        }
    }
}
