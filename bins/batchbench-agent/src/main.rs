fn main() {
    std::process::exit(batchbench_agent::run(std::env::args_os()));
}
