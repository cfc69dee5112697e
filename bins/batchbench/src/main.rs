fn main() {
    std::process::exit(batchbench_run::commands::batchbench::run(
        std::env::args_os(),
    ));
}
