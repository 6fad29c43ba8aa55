//! `actcd-bench`: etcd benchmark's commands against any etcd v3 endpoint. The code lives in the
//! `actcd_bench` library (see its docs for the layout).

// jemalloc: about a fifth less client CPU per request than glibc's malloc under this load
// (many small, short-lived allocations in h2 and tonic).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    actcd_bench::cli::main();
}
