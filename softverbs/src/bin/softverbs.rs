//! `softverbs`: the command-line launcher of vqp-softverbs (`softverbs run -- PROGRAM`);
//! see [`vqp_softverbs::launch`].

fn main() {
    std::process::exit(vqp_softverbs::launch::main(std::env::args_os().skip(1)));
}
