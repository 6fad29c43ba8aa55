//! Generates the etcd v3 message and service code from `etcd/*.proto` with protox, a protobuf
//! compiler written in Rust, so building actcd needs no `protoc` binary.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["etcd/rpc.proto", "etcd/kv.proto", "etcd/auth.proto", "etcd/health.proto"];
    let descriptors = protox::compile(files, ["etcd"])?;
    tonic_prost_build::configure()
        // Keys and values are shared between the index, responses and watch events without copies.
        .bytes(".")
        .build_server(true)
        .build_client(true)
        // Services not built yet answer UNIMPLEMENTED instead of being left out.
        .generate_default_stubs(true)
        // Small per-RPC buffers: see src/codec.rs.
        .codec_path("crate::codec::LeanCodec")
        .compile_fds(descriptors)?;
    println!("cargo:rerun-if-changed=etcd");
    Ok(())
}
