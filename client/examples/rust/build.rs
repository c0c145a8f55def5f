// Generates the client stubs from the repository's proto at build time, with protoc from PATH
// (or the PROTOC environment variable).
const PROTO: &str = "../../../proto/attnserve/v1/inference.proto";

fn main() -> std::io::Result<()> {
    // The proto is outside this package, so Cargo must be told to rerun this when it changes
    // (tonic-prost-build 0.14 does not say so itself).
    println!("cargo:rerun-if-changed={PROTO}");
    tonic_prost_build::configure()
        .build_server(false)
        .compile_protos(&[PROTO], &["../../../proto"])
}
