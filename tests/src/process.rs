//! The binaries as a user runs them: a command run to its end, or started in
//! the background and interrupted as Ctrl+C in its terminal would.

use std::ffi::OsStr;
use std::process::{Child, Command, Output, Stdio};

/// Runs `program` with `args` and no standard input, to its end.
pub fn output<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

/// Starts `command` in the background: no standard input, its output piped
/// for [`interrupt`] or `wait_with_output` to collect.
pub fn started(command: &mut Command) -> Child {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{:?}: {e}", command.get_program()))
}

/// Sends SIGINT to `child`, as Ctrl+C in its terminal would.
pub fn sigint(child: &Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap_or_else(|e| panic!("kill: {e}"));
    assert!(status.success(), "kill -INT {}", child.id());
}

/// Interrupts `child` (SIGINT) and waits for its end.
pub fn interrupt(child: Child) -> Output {
    sigint(&child);
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for the interrupted process: {e}"))
}

/// What a process wrote on standard error.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that a process exited 0, showing what it wrote on standard error
/// when it did not.
pub fn succeeded(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
}
