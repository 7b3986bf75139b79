//! Naming the group that holds a run up, when a wait passes its deadline. From the group that
//! waits, the chain of waits is followed: a group of this process by what its worker does now
//! (`Coord`), a group of another process by what that process last said of itself
//! ([`Transport::heard`](super::Transport::heard)), until a group that waits for nobody: that
//! one is running a task past the deadline, or its process is stalled (stopped, or stuck
//! outside the runtime). A report of another process can be older than what happened since:
//! a group reported waiting for a value that its producer has since reported producing (by the
//! producer's last finished task) has received it, so the chain ends there, at the group that
//! fell silent. A chain that comes back to a group already on it is a deadlock.

use super::plan::ValueId;
use super::run::Shared;

/// The chain of waits from `group` (waiting for `value` from group `from`) to the group that
/// holds it up, as a sentence to append to the error (starting with "; ").
pub(super) fn diagnose<T, V>(
    shared: &Shared<T, V>,
    group: usize,
    value: ValueId,
    from: usize,
) -> String {
    let task_name = |index: usize| {
        shared
            .plan
            .tasks
            .get(index)
            .map_or(format!("#{index}"), |t| t.name.clone())
    };
    let mut text = format!("; group {group} waits for value {value} from group {from}");
    let mut seen = vec![group];
    let mut at = from;
    loop {
        if seen.contains(&at) {
            text.push_str(&format!(
                ", which closes a circle of waits (groups {seen:?}): a deadlock"
            ));
            return text;
        }
        seen.push(at);
        let (waits, last) = match shared.transport.heard(at) {
            Some(state) => (state.waiting, Some(state.done)),
            None => {
                let coord = shared.coord();
                let waits = coord
                    .waiting
                    .get(at)
                    .copied()
                    .flatten()
                    .and_then(|v| shared.producer.get(&v).map(|&p| (v, p)));
                if let Some((task, since)) = coord.running.get(at).copied().flatten() {
                    text.push_str(&format!(
                        "; group {at} (this process) has run task '{}' for {:?}",
                        task_name(task),
                        since.elapsed()
                    ));
                    return text;
                }
                (waits, None)
            }
        };
        match waits {
            Some((v, next)) if last.is_some() && produced(shared, v, next) => {
                text.push_str(&format!(
                    "; the process of group {at} is stalled or stuck in a task: it last \
                     reported waiting for value {v}, which group {next} has produced since{}",
                    match last.flatten() {
                        Some(task) => format!(" (its last finished task: '{}')", task_name(task)),
                        None => String::new(),
                    }
                ));
                return text;
            }
            Some((v, next)) => {
                text.push_str(&format!(
                    "; group {at} waits for value {v} from group {next}"
                ));
                at = next;
            }
            None => {
                text.push_str(&match last {
                    Some(Some(task)) => format!(
                        "; the process of group {at} is stalled or stuck in a task: the last \
                         task it reported finishing is '{}', and it waits for nothing",
                        task_name(task)
                    ),
                    Some(None) => format!(
                        "; the process of group {at} is stalled or stuck in a task: it has \
                         reported finishing no task of this run"
                    ),
                    None => format!("; group {at} (this process) waits for nothing"),
                });
                return text;
            }
        }
    }
}

/// Whether group `group` has produced `value`: its last finished task (as this process knows
/// it) comes at or after the task producing `value` in its order.
fn produced<T, V>(shared: &Shared<T, V>, value: ValueId, group: usize) -> bool {
    let last = match shared.transport.heard(group) {
        Some(state) => state.done,
        None => shared.coord().done.get(group).copied().flatten(),
    };
    let order = match shared.plan.order.get(group) {
        Some(order) => order,
        None => return false,
    };
    let position = |task: usize| order.iter().position(|&t| t == task);
    let producer = order
        .iter()
        .copied()
        .find(|&t| shared.plan.tasks[t].outputs.contains(&value));
    match (last.and_then(position), producer.and_then(position)) {
        (Some(done), Some(producer)) => done >= producer,
        _ => false,
    }
}
