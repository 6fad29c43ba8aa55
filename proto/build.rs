//! Generates the etcd v3 message and service code (with the Lock and Election services) from `etcd/*.proto` with protox, a protobuf
//! compiler written in Rust, so building actcd needs no `protoc` binary; and, from the same
//! descriptors, the list of every service and method (`services.rs`), so that the server's
//! health answers, error texts and metric labels name exactly what the protos define; and the
//! members' own peer service from `actcd/peer.proto`.

use std::fmt::Write as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "etcd/rpc.proto",
        "etcd/kv.proto",
        "etcd/auth.proto",
        "etcd/health.proto",
        "etcd/v3lock.proto",
        "etcd/v3election.proto",
    ];
    let descriptors = protox::compile(files, ["etcd"])?;

    let mut services = String::from("&[\n");
    for file in &descriptors.file {
        for service in &file.service {
            let name = format!("{}.{}", file.package(), service.name());
            writeln!(services, "    Service {{ name: {name:?}, methods: &[")?;
            for m in &service.method {
                let kind = match (m.client_streaming(), m.server_streaming()) {
                    (false, false) => "Unary",
                    (true, false) => "ClientStream",
                    (false, true) => "ServerStream",
                    (true, true) => "BidiStream",
                };
                writeln!(
                    services,
                    "        Method {{ service: {name:?}, name: {:?}, kind: MethodKind::{kind} }},",
                    m.name()
                )?;
            }
            writeln!(services, "    ] }},")?;
        }
    }
    services.push(']');
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("services.rs"), services)?;

    // JSON for etcd's gateway, as grpc-gateway's jsonpb writes it there (OrigName): proto field
    // names, int64 as strings, bytes in base64, enums by name, zero values left out; unknown
    // fields are ignored on input, as etcd's gateway ignores them.
    let encoded = prost::Message::encode_to_vec(&descriptors);
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        .out_dir(&out)
        .preserve_proto_field_names()
        .ignore_unknown_fields()
        .build(&[".etcdserverpb", ".mvccpb", ".authpb", ".v3lockpb", ".v3electionpb"])?;

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

    // The peer transport is actcd's own and stays out of `services.rs`: clients never see it.
    let peer = protox::compile(["actcd/peer.proto"], ["."])?;
    // Default stubs, so that a test's fake peer writes only the calls it answers.
    tonic_prost_build::configure()
        .bytes(".")
        .build_server(true)
        .build_client(true)
        .generate_default_stubs(true)
        .compile_fds(peer)?;
    println!("cargo:rerun-if-changed=etcd");
    println!("cargo:rerun-if-changed=actcd");
    Ok(())
}
