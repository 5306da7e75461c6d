//! Compiles the .proto files with protox (pure Rust): the build needs no system `protoc`.
fn main() {
    let files = ["fedmcmc/v1/party.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."]).expect("proto files must compile");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)
        .expect("tonic code generation");
}
