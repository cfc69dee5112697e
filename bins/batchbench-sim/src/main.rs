fn main() {
    std::process::exit(batchbench_simulator::cli::run(std::env::args_os()));
}
