//! `actcd-tables`: etcd's published benchmark tables reproduced against actcd or etcd. The code
//! lives in the `actcd_tables` library (see its docs for the layout).

// jemalloc, as in actcd-bench: the same load client runs inside.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    actcd_tables::cli::main();
}
