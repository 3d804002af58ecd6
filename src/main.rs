fn main() -> std::process::ExitCode {
    guirl::cli::main()
}
