fn main() {
    std::process::exit(batchbench::run(std::env::args_os()));
}
