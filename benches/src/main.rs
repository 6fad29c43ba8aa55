//! `actcd-bench`: etcd benchmark's commands against any etcd v3 endpoint. The code lives in the
//! `actcd_bench` library (see its docs for the layout).

fn main() {
    actcd_bench::cli::main();
}
