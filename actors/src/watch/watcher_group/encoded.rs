//! An event as its watchers get it: encoded once, in each of the two forms a watcher may want
//! (with or without the previous key-value), and shared by every response that carries it.
//! Each form is encoded on first use: most events have no watcher that wants the previous
//! key-value (whose lookup reads storage), and some have no watcher at all.

use actcd_proto::mvccpb::Event;
use actcd_proto::watch_reply::SharedEvent;

use super::history::{previous, History};

/// One event's encodings, for the watchers of one delivery.
#[derive(Default)]
pub(super) struct Encoded {
    plain: Option<SharedEvent>,
    with_prev: Option<SharedEvent>,
}

impl Encoded {
    /// `event` as a watcher that wants (`prev_kv`) or does not want the previous key-value
    /// gets it.
    pub(super) fn get(&mut self, event: &Event, prev_kv: bool, history: &impl History) -> SharedEvent {
        if prev_kv {
            let with_prev =
                || SharedEvent::new(&Event { prev_kv: previous(event, history), ..event.clone() });
            self.with_prev.get_or_insert_with(with_prev).clone()
        } else {
            self.plain.get_or_insert_with(|| SharedEvent::new(event)).clone()
        }
    }
}
