//! Exit codes and the failures that carry them.

use batchbench_contract::plugin::PluginError;
use batchbench_engine::run::EngineError;

/// Exit code of a run that completed.
pub const EXIT_OK: i32 = 0;
/// Exit code of a run that could not complete.
pub const EXIT_FAILED: i32 = 1;
/// Exit code of bad input (nothing was sent).
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code after Ctrl+C (a partial summary was printed).
pub const EXIT_INTERRUPTED: i32 = 130;

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    /// Exit code.
    pub code: i32,
    /// The error.
    pub error: anyhow::Error,
}

impl Failure {
    /// Bad input: exit 2.
    pub fn bad_input(e: impl Into<anyhow::Error>) -> Self {
        Self {
            code: EXIT_BAD_INPUT,
            error: e.into(),
        }
    }

    /// Bad input described by a message: exit 2.
    pub fn bad(message: impl std::fmt::Display) -> Self {
        Self::bad_input(anyhow::anyhow!("{message}"))
    }

    /// A command line clap refused, as bad input: its first line.
    pub fn bad_args(e: &clap::Error) -> Self {
        Self::bad(e.to_string().lines().next().unwrap_or("invalid arguments"))
    }

    /// A run that could not complete: exit 1.
    pub fn failed(e: impl Into<anyhow::Error>) -> Self {
        Self {
            code: EXIT_FAILED,
            error: e.into(),
        }
    }

    /// A run that could not complete, described by a message: exit 1.
    pub fn failed_msg(message: impl std::fmt::Display) -> Self {
        Self::failed(anyhow::anyhow!("{message}"))
    }

    /// Whether this is bad input.
    pub fn is_bad_input(&self) -> bool {
        self.code == EXIT_BAD_INPUT
    }
}

/// SIGINT (Ctrl+C) as a stream, its handler registered when this returns
/// (within a tokio runtime): a signal that comes before the first `recv` is
/// kept, not lost, and does not kill the process.
pub fn interrupts() -> Interrupts {
    #[cfg(unix)]
    {
        Interrupts(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok())
    }
    #[cfg(not(unix))]
    {
        Interrupts(())
    }
}

/// A token cancelled by the first Ctrl+C, after `message` (when there is one)
/// on stderr; a second Ctrl+C exits at once with 130. The handler is watched
/// on its own thread and registered before this returns, so a SIGINT at any
/// later moment cancels instead of killing the process.
pub fn ctrl_c_token(message: Option<&'static str>) -> tokio_util::sync::CancellationToken {
    let token = tokio_util::sync::CancellationToken::new();
    let t = token.clone();
    let (ready, registered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            let _ = ready.send(());
            return;
        };
        rt.block_on(async move {
            let mut interrupts = interrupts();
            let _ = ready.send(());
            if interrupts.recv().await {
                if let Some(m) = message {
                    eprintln!("{m}");
                }
                t.cancel();
                if interrupts.recv().await {
                    std::process::exit(EXIT_INTERRUPTED);
                }
            }
        });
    });
    let _ = registered.recv();
    token
}

/// See [`interrupts`].
#[derive(Debug)]
pub struct Interrupts(
    #[cfg(unix)] Option<tokio::signal::unix::Signal>,
    #[cfg(not(unix))] (),
);

impl Interrupts {
    /// Waits for the next SIGINT; false when none can come.
    pub async fn recv(&mut self) -> bool {
        #[cfg(unix)]
        {
            match self.0.as_mut() {
                Some(s) => s.recv().await.is_some(),
                None => std::future::pending().await,
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.is_ok()
        }
    }
}

/// Maps a plugin error to its exit code.
pub fn plugin_failure(e: PluginError) -> Failure {
    match e {
        PluginError::Config { .. } | PluginError::Plan(_) | PluginError::Unknown { .. } => {
            Failure::bad_input(e)
        }
        _ => Failure::failed(e),
    }
}

/// Maps an engine error to its exit code.
pub fn engine_failure(e: EngineError) -> Failure {
    if e.is_bad_input() {
        Failure::bad_input(e)
    } else {
        Failure::failed(e)
    }
}

/// The exit code of a run, printing a failure as `prog: message`.
pub fn exit_code(prog: &str, result: Result<i32, Failure>) -> i32 {
    match result {
        Ok(code) => code,
        Err(f) => {
            eprintln!("{prog}: {:#}", f.error);
            f.code
        }
    }
}

/// Prints a clap error the way every batchbench error is printed: one line naming
/// the flag (help and version go to stdout unchanged).
pub fn clap_exit(prog: &str, e: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            EXIT_OK
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("{prog}: {first}");
            EXIT_BAD_INPUT
        }
    }
}

/// The runtime of a run, with `threads` worker threads.
pub fn runtime(threads: u32) -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1) as usize)
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(anyhow::anyhow!("cannot start the async runtime: {e}")))
}
