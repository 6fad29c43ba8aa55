//! etcd's rules for a membership change, checked before the change is proposed: one change at
//! a time (add, remove, update, promote, a member's own record), each refused with etcd 3.4's
//! error when it would cost the cluster its quorum or break the membership.
//!
//! openraft checks none of these: it takes any change whose previous one committed. etcd 3.4
//! checks in two places, and so does this module, in etcd's order:
//!
//! ```text
//!  strict reconfig check (--strict-reconfig-check, on by default), on the leader's view:
//!    add voter    started voters >= quorum(voters + 1)        else not enough started members
//!    add any      every voter connected >= 5 s to the leader   else unhealthy cluster
//!    remove voter started voters but it >= quorum(voters - 1)  else not enough started members
//!                 (a target never connected is removable at once)
//!                 connected voters (leader too) - 1 >= quorum(voters - 1)   else unhealthy cluster
//!    promote      learner's matched index >= 90 % of the leader's        else not in sync
//!                 started voters + the learner >= quorum(voters + 1)     else not enough started
//!  validity (etcd's ValidateConfigurationChange):
//!    a removed id is gone for good (member not found), ids and peer URLs are unique, at most
//!    --max-learners learners, only a learner is promoted.
//! ```
//!
//! Worked example: three voters, m3 down for a minute. Adding a learner is refused (m3 is not
//! connected: unhealthy cluster); removing m3 is allowed (it is not connected, so it is not in
//! the active quorum); removing m2 is refused: connected voters are m1 and m2, 2 - 1 = 1 is
//! below quorum(2) = 2.
//!
//! "Started" is etcd's: the member has published its name, which a member added by MemberAdd
//! does once it runs. Time is a parameter ([`Health::now`]), so the rules run with no clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::types::MemberNode;
pub use actcd_store::error::ReconfigError;
use serde::{Deserialize, Serialize};

/// How long a peer must have been connected to count as healthy (etcd's HealthInterval).
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// A learner may be promoted once its log matches this share of the leader's (etcd's
/// readyPercent).
const READY_SHARE: f64 = 0.9;

/// One membership change, as a member takes it from a client (or a member publishes itself).
/// The fields are the RPCs' own (MemberAddRequest's peer URLs and learner flag, ...).
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// MemberAdd: a new member `id` (chosen by the member that took the call) on `peer_urls`.
    Add { id: u64, peer_urls: Vec<String>, learner: bool },
    /// MemberRemove.
    Remove { id: u64 },
    /// MemberUpdate: new peer URLs; the name, client URLs and learner flag stay.
    Update { id: u64, peer_urls: Vec<String> },
    /// MemberPromote: a learner becomes a voter.
    Promote { id: u64 },
    /// A member's own name and client URLs, published once it runs (etcd's publish).
    Publish { id: u64, name: String, client_urls: Vec<String> },
}

impl Change {
    /// The member the change is about.
    pub fn id(&self) -> u64 {
        match self {
            Change::Add { id, .. }
            | Change::Remove { id }
            | Change::Update { id, .. }
            | Change::Promote { id }
            | Change::Publish { id, .. } => *id,
        }
    }
}

/// The membership a change is checked against, and what a member asking for the membership
/// gets (a member joining, or one that wonders whether it was removed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Members {
    /// Every member, voter or learner, with its record.
    pub nodes: BTreeMap<u64, MemberNode>,
    /// The voters among them.
    pub voters: BTreeSet<u64>,
    /// Every id ever removed: never a member again.
    pub removed: BTreeSet<u64>,
}

impl Members {
    /// The membership `raft`'s metrics show, with the `removed` ids.
    pub fn of(membership: &openraft::Membership<u64, MemberNode>, removed: BTreeSet<u64>) -> Self {
        Self {
            nodes: membership.nodes().map(|(id, node)| (*id, node.clone())).collect(),
            voters: membership.voter_ids().collect(),
            removed,
        }
    }

    /// Whether `id` is a member that is no voter.
    pub fn is_learner(&self, id: u64) -> bool {
        self.nodes.contains_key(&id) && !self.voters.contains(&id)
    }

    fn started(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|node| !node.name.is_empty())
    }

    fn started_voters(&self, except: Option<u64>) -> usize {
        self.voters.iter().filter(|v| Some(**v) != except && self.started(**v)).count()
    }
}

/// What the leader knows of its peers' connections, at `now`.
#[derive(Debug, Clone)]
pub struct Health {
    /// The leader itself: always connected.
    pub me: u64,
    /// Since when each peer has answered without a break (absent: not connected now).
    pub active_since: BTreeMap<u64, Instant>,
    /// The time the check runs at.
    pub now: Instant,
}

impl Health {
    fn connected_long_enough(&self, id: u64) -> bool {
        id == self.me
            || self
                .active_since
                .get(&id)
                .is_some_and(|since| self.now.saturating_duration_since(*since) >= HEALTH_INTERVAL)
    }

    fn ever_connected(&self, id: u64) -> bool {
        id == self.me || self.active_since.contains_key(&id)
    }
}

/// The checks' settings (etcd's flags).
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// `--strict-reconfig-check`.
    pub strict: bool,
    /// `--max-learners`.
    pub max_learners: usize,
}

/// How far the leader's log is matched: the leader's own last index and each member's.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// The leader's last log index.
    pub leader: u64,
    /// Each follower's matched index, as replication last reported it.
    pub matched: BTreeMap<u64, u64>,
}

fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// Checks `change` against `members` under `rules`, as the leader with `health` and `progress`
/// sees the cluster. `Ok` means the change may be proposed.
pub fn check(
    change: &Change,
    members: &Members,
    rules: Rules,
    health: &Health,
    progress: &Progress,
) -> Result<(), ReconfigError> {
    if rules.strict {
        strict(change, members, health, progress)?;
    } else if let Change::Promote { id } = change {
        // The readiness of a learner is checked whatever the flag says, as etcd does.
        learner_ready(*id, progress)?;
    }
    valid(change, members, rules)
}

/// etcd's strict reconfig check (mayAddMember, mayRemoveMember, mayPromoteMember).
fn strict(
    change: &Change,
    members: &Members,
    health: &Health,
    progress: &Progress,
) -> Result<(), ReconfigError> {
    match change {
        Change::Add { learner, .. } => {
            if !learner {
                let started = members.started_voters(None);
                let voters = members.voters.len() + 1;
                // A member alone may add a second one: the pair cannot form a quorum until it starts.
                let pair = started == 1 && voters == 2;
                if !pair && started < quorum(voters) {
                    return Err(ReconfigError::NotEnoughStarted);
                }
            }
            if !members.voters.iter().all(|v| health.connected_long_enough(*v)) {
                return Err(ReconfigError::Unhealthy);
            }
            Ok(())
        }
        Change::Remove { id } => {
            if members.is_learner(*id) {
                return Ok(());
            }
            let left = members.voters.iter().filter(|v| **v != *id).count();
            if members.started_voters(Some(*id)) < quorum(left) {
                return Err(ReconfigError::NotEnoughStarted);
            }
            // A member that is down is not part of the active quorum: safe to remove.
            if !health.ever_connected(*id) {
                return Ok(());
            }
            let active = members.voters.iter().filter(|v| health.connected_long_enough(**v)).count();
            if active.saturating_sub(1) < quorum(left) {
                return Err(ReconfigError::Unhealthy);
            }
            Ok(())
        }
        Change::Promote { id } => {
            learner_ready(*id, progress)?;
            let started = members.started_voters(None) + 1;
            let voters = members.voters.len() + 1;
            let pair = started == 1 && voters == 2;
            if !pair && started < quorum(voters) {
                return Err(ReconfigError::NotEnoughStarted);
            }
            Ok(())
        }
        Change::Update { .. } | Change::Publish { .. } => Ok(()),
    }
}

/// A member the leader replicates to must have matched 90 % of the leader's log; one it does
/// not replicate to is left to the validity check (not found, or not a learner).
fn learner_ready(id: u64, progress: &Progress) -> Result<(), ReconfigError> {
    match progress.matched.get(&id) {
        Some(matched) if (*matched as f64) < (progress.leader as f64) * READY_SHARE => {
            Err(ReconfigError::LearnerNotReady)
        }
        _ => Ok(()),
    }
}

/// etcd's ValidateConfigurationChange: what the membership itself allows.
fn valid(change: &Change, members: &Members, rules: Rules) -> Result<(), ReconfigError> {
    let id = change.id();
    if members.removed.contains(&id) {
        return Err(ReconfigError::NotFound);
    }
    let url_taken = |urls: &[String], except: Option<u64>| {
        members
            .nodes
            .iter()
            .filter(|(other, _)| Some(**other) != except)
            .any(|(_, node)| node.peer_urls.iter().any(|u| urls.contains(u)))
    };
    match change {
        Change::Add { peer_urls, learner, .. } => {
            if members.nodes.contains_key(&id) {
                return Err(ReconfigError::IdExists);
            }
            if url_taken(peer_urls, None) {
                return Err(ReconfigError::PeerUrlExists);
            }
            let learners = members.nodes.keys().filter(|n| members.is_learner(**n)).count();
            if *learner && learners >= rules.max_learners {
                return Err(ReconfigError::TooManyLearners);
            }
            Ok(())
        }
        Change::Remove { .. } => members.nodes.contains_key(&id).then_some(()).ok_or(ReconfigError::NotFound),
        Change::Update { peer_urls, .. } => {
            if !members.nodes.contains_key(&id) {
                return Err(ReconfigError::NotFound);
            }
            if url_taken(peer_urls, Some(id)) {
                return Err(ReconfigError::PeerUrlExists);
            }
            Ok(())
        }
        Change::Promote { .. } => {
            if !members.nodes.contains_key(&id) {
                return Err(ReconfigError::NotFound);
            }
            if !members.is_learner(id) {
                return Err(ReconfigError::NotLearner);
            }
            Ok(())
        }
        Change::Publish { name, .. } => match members.nodes.get(&id) {
            None => Err(ReconfigError::NotFound),
            // The name is set once: by --initial-cluster, or by the member's first publish.
            Some(node) if !node.name.is_empty() && node.name != *name => Err(ReconfigError::NotOwnRecord),
            Some(_) => Ok(()),
        },
    }
}

/// The record a member has after `change` (for the changes that set one).
pub fn changed_node(change: &Change, known: Option<&MemberNode>) -> Option<MemberNode> {
    let known = known.cloned().unwrap_or_default();
    match change {
        Change::Add { peer_urls, .. } => {
            Some(MemberNode { peer_urls: peer_urls.clone(), ..MemberNode::default() })
        }
        Change::Update { peer_urls, .. } => Some(MemberNode { peer_urls: peer_urls.clone(), ..known }),
        Change::Publish { name, client_urls, .. } => {
            Some(MemberNode { name: name.clone(), client_urls: client_urls.clone(), ..known })
        }
        Change::Remove { .. } | Change::Promote { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, port: u16) -> MemberNode {
        MemberNode {
            name: name.into(),
            peer_urls: vec![format!("http://127.0.0.1:{port}")],
            client_urls: vec![],
        }
    }

    /// Voters 1..=n named and on ports 2381.., all connected for a minute, as leader 1 sees them.
    fn cluster(n: u64) -> (Members, Health) {
        let now = Instant::now() + Duration::from_secs(600);
        let nodes: BTreeMap<u64, MemberNode> =
            (1..=n).map(|i| (i, node(&format!("m{i}"), 2380 + i as u16))).collect();
        let voters = nodes.keys().copied().collect();
        let active_since = (2..=n).map(|i| (i, now - Duration::from_secs(60))).collect();
        (Members { nodes, voters, removed: BTreeSet::new() }, Health { me: 1, active_since, now })
    }

    const STRICT: Rules = Rules { strict: true, max_learners: 1 };

    fn add(id: u64, port: u16, learner: bool) -> Change {
        Change::Add { id, peer_urls: vec![format!("http://127.0.0.1:{port}")], learner }
    }

    #[test]
    fn the_worked_example_of_a_member_down() {
        let (members, mut health) = cluster(3);
        health.active_since.remove(&3);
        let none = Progress::default();
        assert_eq!(
            check(&add(9, 2399, true), &members, STRICT, &health, &none),
            Err(ReconfigError::Unhealthy)
        );
        assert_eq!(check(&Change::Remove { id: 3 }, &members, STRICT, &health, &none), Ok(()));
        assert_eq!(
            check(&Change::Remove { id: 2 }, &members, STRICT, &health, &none),
            Err(ReconfigError::Unhealthy)
        );
        // Without the strict check, only validity counts.
        let lax = Rules { strict: false, ..STRICT };
        assert_eq!(check(&Change::Remove { id: 2 }, &members, lax, &health, &none), Ok(()));
    }

    #[test]
    fn a_peer_connected_for_less_than_five_seconds_is_not_yet_healthy() {
        let (members, mut health) = cluster(3);
        health.active_since.insert(3, health.now - Duration::from_secs(4));
        let none = Progress::default();
        assert_eq!(
            check(&add(9, 2399, true), &members, STRICT, &health, &none),
            Err(ReconfigError::Unhealthy)
        );
        health.active_since.insert(3, health.now - HEALTH_INTERVAL);
        assert_eq!(check(&add(9, 2399, true), &members, STRICT, &health, &none), Ok(()));
    }

    #[test]
    fn adding_a_voter_needs_a_quorum_of_started_voters_in_the_grown_cluster() {
        let (mut members, health) = cluster(3);
        let none = Progress::default();
        // A fourth voter added but never started: adding a fifth, 3 started >= quorum(5).
        members.nodes.insert(
            4,
            MemberNode { peer_urls: vec!["http://127.0.0.1:2399".into()], ..MemberNode::default() },
        );
        members.voters.insert(4);
        let mut connected = health.clone();
        connected.active_since.insert(4, health.now - Duration::from_secs(60));
        assert_eq!(check(&add(5, 2398, false), &members, STRICT, &connected, &none), Ok(()));
        // A fifth never started: 3 started of 6 is below quorum(6) = 4.
        members.nodes.insert(
            5,
            MemberNode { peer_urls: vec!["http://127.0.0.1:2398".into()], ..MemberNode::default() },
        );
        members.voters.insert(5);
        connected.active_since.insert(5, health.now - Duration::from_secs(60));
        assert_eq!(
            check(&add(6, 2397, false), &members, STRICT, &connected, &none),
            Err(ReconfigError::NotEnoughStarted)
        );
        // A learner does not change the quorum.
        assert_eq!(check(&add(6, 2397, true), &members, STRICT, &connected, &none), Ok(()));
    }

    #[test]
    fn a_member_alone_may_add_a_second() {
        let (members, health) = cluster(1);
        assert_eq!(check(&add(2, 2390, false), &members, STRICT, &health, &Progress::default()), Ok(()));
    }

    #[test]
    fn validity_refuses_taken_ids_and_urls_removed_ids_and_a_second_learner() {
        let (mut members, health) = cluster(3);
        let none = Progress::default();
        assert_eq!(
            check(&add(2, 2399, false), &members, STRICT, &health, &none),
            Err(ReconfigError::IdExists)
        );
        assert_eq!(
            check(&add(9, 2382, false), &members, STRICT, &health, &none),
            Err(ReconfigError::PeerUrlExists)
        );
        members.removed.insert(9);
        assert_eq!(
            check(&add(9, 2399, false), &members, STRICT, &health, &none),
            Err(ReconfigError::NotFound)
        );
        assert_eq!(
            check(&Change::Remove { id: 9 }, &members, STRICT, &health, &none),
            Err(ReconfigError::NotFound)
        );
        members.nodes.insert(8, node("", 2398));
        assert_eq!(
            check(&add(7, 2397, true), &members, STRICT, &health, &none),
            Err(ReconfigError::TooManyLearners)
        );
        let two = Rules { max_learners: 2, ..STRICT };
        assert_eq!(check(&add(7, 2397, true), &members, two, &health, &none), Ok(()));
        // An update may keep its own URL, not take another member's.
        let update =
            |urls: &[&str]| Change::Update { id: 2, peer_urls: urls.iter().map(|u| u.to_string()).collect() };
        assert_eq!(check(&update(&["http://127.0.0.1:2382"]), &members, STRICT, &health, &none), Ok(()));
        assert_eq!(
            check(&update(&["http://127.0.0.1:2383"]), &members, STRICT, &health, &none),
            Err(ReconfigError::PeerUrlExists)
        );
    }

    #[test]
    fn promote_needs_a_learner_in_sync_with_the_leader() {
        let (mut members, mut health) = cluster(3);
        members.nodes.insert(4, node("", 2399));
        health.active_since.insert(4, health.now);
        let progress = |matched: u64| Progress {
            leader: 1000,
            matched: BTreeMap::from([(2, 1000), (3, 1000), (4, matched)]),
        };
        let promote = Change::Promote { id: 4 };
        assert_eq!(
            check(&promote, &members, STRICT, &health, &progress(899)),
            Err(ReconfigError::LearnerNotReady)
        );
        assert_eq!(check(&promote, &members, STRICT, &health, &progress(900)), Ok(()));
        // Not strict: readiness still counts.
        let lax = Rules { strict: false, ..STRICT };
        assert_eq!(
            check(&promote, &members, lax, &health, &progress(10)),
            Err(ReconfigError::LearnerNotReady)
        );
        assert_eq!(
            check(&Change::Promote { id: 2 }, &members, STRICT, &health, &progress(1000)),
            Err(ReconfigError::NotLearner)
        );
        assert_eq!(
            check(&Change::Promote { id: 77 }, &members, STRICT, &health, &progress(1000)),
            Err(ReconfigError::NotFound)
        );
    }

    #[test]
    fn a_member_publishes_its_name_once_and_only_its_own() {
        let (mut members, health) = cluster(3);
        members.nodes.insert(4, node("", 2399));
        let none = Progress::default();
        let publish = |id, name: &str| Change::Publish { id, name: name.into(), client_urls: vec![] };
        assert_eq!(check(&publish(4, "m4"), &members, STRICT, &health, &none), Ok(()));
        assert_eq!(check(&publish(2, "m2"), &members, STRICT, &health, &none), Ok(()));
        assert_eq!(
            check(&publish(2, "other"), &members, STRICT, &health, &none),
            Err(ReconfigError::NotOwnRecord)
        );
        let updated = changed_node(
            &Change::Update { id: 2, peer_urls: vec!["http://h:1".into()] },
            members.nodes.get(&2),
        );
        assert_eq!(
            updated.map(|n| (n.name, n.peer_urls)),
            Some(("m2".into(), vec!["http://h:1".to_string()]))
        );
    }
}
