//! The `batchbench-sim` command line: the simulator as a standalone server.

use crate::{Sim, SimConfig};
use anyhow::Context;
use clap::Parser;
use std::ffi::OsString;
use std::net::SocketAddr;

/// An OpenAI-compatible LLM server simulator for batchbench.
#[derive(Debug, Parser)]
#[command(name = "batchbench-sim", version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one); with --replicas N, replica i
    /// listens on port + i.
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Tokenizer used to count prompt tokens: a tokenizer.json, a directory holding
    /// one, or a Hugging Face model id.
    #[arg(long)]
    tokenizer_model: String,
    /// A served model's own tokenizer, NAME=TOKENIZER (repeatable): its
    /// requests' prompts are counted with it (name an adapter too, where a
    /// request names its adapter in `model`).
    #[arg(long, value_name = "NAME=TOKENIZER")]
    model_tokenizer: Vec<String>,
    #[command(flatten)]
    sim: SimConfig,
}

/// Runs `batchbench-sim` with `args` (program name first) until Ctrl+C; returns
/// the exit code (2 for bad arguments or a server that cannot start).
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    match serve(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("batchbench-sim: {e:#}");
            2
        }
    }
}

fn serve(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async {
        let tok = batchbench_engine::tokens::load(&args.tokenizer_model).await?;
        let mut own = Vec::new();
        for pair in &args.model_tokenizer {
            let (name, path) = pair.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("--model-tokenizer: '{pair}' is not NAME=TOKENIZER")
            })?;
            let t = batchbench_engine::tokens::load(path.trim())
                .await
                .with_context(|| format!("--model-tokenizer {pair}"))?;
            own.push((name.trim().to_owned(), t));
        }
        let addr: SocketAddr = format!("{}:{}", args.host, args.port)
            .parse()
            .with_context(|| format!("invalid address {}:{}", args.host, args.port))?;
        args.sim.validate().map_err(anyhow::Error::msg)?;
        let mut sims = Vec::new();
        for i in 0..args.sim.replicas {
            let mut at = addr;
            if addr.port() != 0 {
                let port = u16::try_from(u32::from(addr.port()) + i)
                    .map_err(|_| anyhow::anyhow!("replica {i} would need a port above 65535"))?;
                at.set_port(port);
            }
            let sim = Sim::start_with_models(args.sim.replica(i), tok.clone(), own.clone(), at)
                .await
                .with_context(|| format!("cannot listen on {at}"))?;
            eprintln!("batchbench-sim listening on {}", sim.url());
            sims.push(sim);
        }
        let cancel = tokio_util::sync::CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            c.cancel();
        });
        let mut tasks = tokio::task::JoinSet::new();
        for sim in sims {
            tasks.spawn(sim.serve_until(cancel.clone()));
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    })
}
