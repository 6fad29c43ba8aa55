//! The serving threads' hand-out of connections: to the thread that serves the fewest.

use actcd::transport::connection_budget::{Load, ThreadShare};

#[test]
fn a_connection_goes_to_the_thread_serving_the_fewest() {
    let load = Load::new(3);
    let mut first: Vec<ThreadShare> = (0..3).map(|_| load.take_least()).collect();
    assert_eq!(first.iter().map(ThreadShare::thread).collect::<Vec<_>>(), [0, 1, 2]);
    let again = load.take_least();
    assert_eq!(again.thread(), 0);
    // Thread 1's connection ends: the next goes there, though thread 2 has as few as it had.
    drop(first.remove(1));
    let next = load.take_least();
    assert_eq!(next.thread(), 1);
    assert_eq!(load.counts(), [2, 1, 1]);
    drop((again, next));
    assert_eq!(load.counts(), [1, 0, 1], "an ended connection gives its place back");
}
