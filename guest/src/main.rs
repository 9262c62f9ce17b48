fn main() {
    eprintln!("p2p-guest: not built yet");
    std::process::exit(2);
}
