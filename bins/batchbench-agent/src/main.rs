fn main() {
    std::process::exit(batchbench_run::commands::agent::run(std::env::args_os()));
}
