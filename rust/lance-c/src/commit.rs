//! Committing an operation that was prepared on an older version.
//!
//! Lance rebases a commit onto the versions committed since its read
//! version by reading their manifests and transactions. A cleanup (another
//! handle's, another process's) may have removed some of them: Lance then
//! skips what it cannot list, so a conflict hidden in a removed version goes
//! unseen, and fails with NotFound for one removed between its listing and
//! its read. kv0 commits two operations, and both are kept safe here:
//!
//! - An Append adds new fragments and commutes with every other operation
//!   kv0 makes, so skipped versions cannot hide a conflict. A version removed
//!   mid-rebase makes it start again from the latest version.
//! - An Update replaces fragments whose rows it read. Before committing, it
//!   compares each of them in the latest version with the one it read: the
//!   same fragment (same files, same deletion file) means no version in
//!   between touched it, whatever cleanup removed. The commit is then based
//!   on the latest version, so Lance's own rebase covers only versions newer
//!   than that check.
//!
//! Left open: a cleanup whose retention is shorter than a commit takes could
//! still remove a version committed during this commit's rebase.
//!
//! Lance gives up retrying a commit that keeps losing races to concurrent
//! writers after its own budget (30 seconds, 20 attempts). kv0 has one bound
//! for a commit, the handle's commit_timeout (or none), so every commit here
//! retries for as long as that allows; see `builder`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lance::dataset::transaction::{Operation, Transaction};
use lance::dataset::CommitBuilder;
use lance::Dataset;
use lance_table::format::Fragment;

/// Attempts after a version vanished mid-rebase, before giving up.
const ATTEMPTS: usize = 4;

/// A commit builder on `base` that retries lost races for `timeout` (the
/// handle's commit_timeout, which bounds the whole call as well), or for
/// as long as it takes when there is none.
pub fn builder(base: Dataset, timeout: Option<Duration>) -> CommitBuilder<'static> {
    const NO_BOUND: Duration = Duration::from_secs(365 * 24 * 3600);
    CommitBuilder::new(Arc::new(base))
        .with_max_retries(u32::MAX)
        .with_retry_timeout(timeout.unwrap_or(NO_BOUND))
}

/// Commits `operation`, whose rows were read at `read`, retrying lost races
/// for `timeout` (see `builder`), and returns the dataset at the new version.
pub async fn commit(
    read: Dataset,
    operation: Operation,
    timeout: Option<Duration>,
) -> lance::Result<Dataset> {
    let mut base = match operation {
        Operation::Update { .. } => latest_unchanged(&read, &operation).await?,
        _ => read.clone(),
    };
    let mut attempt = 1;
    loop {
        let transaction = Transaction::new(base.version().version, operation.clone(), None);
        match builder(base, timeout).execute(transaction).await {
            Err(err) if attempt < ATTEMPTS && version_vanished(&err) => {
                base = latest_unchanged(&read, &operation).await?;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Whether a commit failed because a manifest or transaction it was reading
/// to rebase was removed under it. Lance reports it as NotFound,
/// DatasetNotFound or an I/O error, depending on the read that met it, so
/// the message is what they share.
fn version_vanished(err: &lance::Error) -> bool {
    let message = err.to_string();
    message.to_lowercase().contains("not found")
        && (message.contains("_versions/") || message.contains("_transactions/"))
}

/// The latest version, provided the fragments `operation` replaces and the
/// schema are as they were at `read`; Conflict otherwise.
async fn latest_unchanged(read: &Dataset, operation: &Operation) -> lance::Result<Dataset> {
    let mut latest = read.clone();
    latest.checkout_latest().await?;
    let conflict = |what: String| {
        lance::Error::retryable_commit_conflict_source(
            latest.version().version,
            format!(
                "{what} between versions {} and {}",
                read.version().version,
                latest.version().version
            )
            .into(),
        )
    };
    if latest.schema() != read.schema() {
        return Err(conflict("the schema changed".to_owned()));
    }
    if let Operation::Update {
        removed_fragment_ids,
        ..
    } = operation
    {
        let now: HashMap<u64, &Fragment> = latest.fragments().iter().map(|f| (f.id, f)).collect();
        for fragment in read.fragments().iter() {
            if removed_fragment_ids.contains(&fragment.id)
                && now.get(&fragment.id) != Some(&fragment)
            {
                return Err(conflict(format!("fragment {} changed", fragment.id)));
            }
        }
    }
    Ok(latest)
}
