//! glibc's heap, which RocksDB allocates from (jemalloc serves Rust's allocations only; its
//! options are in main.rs): keep large blocks mmapped, and give freed memory back while the
//! server is idle. Both are glibc calls, so this file holds the crate's unsafe exceptions, one
//! justified beside each.
//!
//! Why the trimmer: after five concurrent full reads of 200k keys × 1 KiB, about 800 MB stayed
//! resident outside jemalloc, in glibc arenas that RocksDB's read buffers had used and freed.
//! glibc returns such memory only from the top of the main heap, and never from the per-thread
//! arenas, unless `malloc_trim` asks; so a thread checks every [`TRIM_EVERY`] how much free
//! memory the arenas hold and trims when it is more than [`TRIM_ABOVE`].

use std::time::Duration;

/// How often the arenas' free memory is looked at (one `mallinfo2`, a lock per arena).
pub const TRIM_EVERY: Duration = Duration::from_secs(2);
/// Free memory the arenas may keep for the next burst before it is given back.
pub const TRIM_ABOVE: usize = 32 << 20;

/// glibc raises its mmap threshold each time a large mmapped block is freed (up to 32 MiB), so
/// the memtables' multi-MiB arena blocks move onto its heap, where freed ones stay resident: 323
/// MB of RSS after loading 1M keys × 5 versions of 1 KiB, against 259 MB with a fixed threshold,
/// which keeps large blocks mmapped and gives them back to the OS when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn keep_large_allocations_mmapped() {
    const THRESHOLD: libc::c_int = 1 << 20;
    // An unsafe exception: mallopt only sets a malloc parameter, before any other thread runs.
    #[allow(unsafe_code)]
    let _ = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn keep_large_allocations_mmapped() {}

/// Free bytes the arenas hold, and the trim if they are over [`TRIM_ABOVE`]; returns what was
/// free before.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_if_worth_it() -> usize {
    // An unsafe exception: mallinfo2 only reads the allocator's counters (glibc 2.33+).
    #[allow(unsafe_code)]
    let free = unsafe { libc::mallinfo2() }.fordblks;
    if free > TRIM_ABOVE {
        // An unsafe exception: malloc_trim releases free pages of every arena; it takes the
        // arenas' locks, so allocations on other threads wait for it, never see freed memory.
        #[allow(unsafe_code)]
        let _ = unsafe { libc::malloc_trim(0) };
    }
    free
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_if_worth_it() -> usize {
    0
}

/// Starts the trimmer thread (it lives as long as the process).
pub fn start_trimmer() -> std::io::Result<()> {
    std::thread::Builder::new().name("c-heap-trim".into()).spawn(|| loop {
        std::thread::sleep(TRIM_EVERY);
        let free = trim_if_worth_it();
        if free > TRIM_ABOVE {
            tracing::debug!(free_mb = free >> 20, "gave glibc's free memory back to the OS");
        }
    })?;
    Ok(())
}
