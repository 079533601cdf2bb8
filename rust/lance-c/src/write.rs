//! Writing rows: appends, uncommitted fragments, and Update commits.
//!
//! Lance assigns fragment ids at commit time and may rebase a commit onto
//! versions other writers committed meanwhile, so the ids of the fragments a
//! commit added are found afterwards by their data file, which Lance names
//! uniquely.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use lance::dataset::transaction::{Operation, UpdateMode};
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance::Dataset;
use lance_table::format::key_existence::KeyExistenceFilter;
use lance_table::format::Fragment;

use crate::commit::commit;
use crate::dataset::{handle, LanceDataset};
use crate::error::{guard, Failure, Result};
use crate::ffi::{give_ids, out, u64s};
use crate::runtime::{block_on, block_on_within};

/// Fragments written but not yet committed.
pub struct LanceFragments {
    pub(crate) fragments: Vec<Fragment>,
}

/// Takes ownership of a C stream (it is marked released).
fn input(stream: *mut FFI_ArrowArrayStream) -> Result<ArrowArrayStreamReader> {
    if stream.is_null() {
        return Err(Failure::invalid("input stream must not be NULL"));
    }
    unsafe { ArrowArrayStreamReader::from_raw(stream) }.map_err(Failure::from)
}

/// Everything the stream holds goes into one fragment (Lance's limit on
/// rows per fragment is the 32-bit row offset).
fn one_fragment() -> WriteParams {
    WriteParams {
        mode: WriteMode::Append,
        max_rows_per_file: u32::MAX as usize,
        ..Default::default()
    }
}

async fn write_uncommitted(
    dataset: Dataset,
    reader: ArrowArrayStreamReader,
) -> lance::Result<Vec<Fragment>> {
    let params = one_fragment();
    let transaction = InsertBuilder::new(Arc::new(dataset))
        .with_params(&params)
        .execute_uncommitted_stream(reader)
        .await?;
    match transaction.operation {
        Operation::Append { fragments } => Ok(fragments),
        other => Err(lance::Error::internal(format!(
            "an append produced a {} operation",
            other.name()
        ))),
    }
}

fn first_file(fragment: &Fragment) -> Option<&str> {
    fragment.files.first().map(|f| f.path.as_str())
}

/// The ids, in `written` order, that `committed` gave to the written fragments.
pub(crate) fn committed_ids(committed: &Dataset, written: &[Fragment]) -> Vec<u64> {
    let by_file: std::collections::HashMap<&str, u64> = committed
        .fragments()
        .iter()
        .filter_map(|f| first_file(f).map(|path| (path, f.id)))
        .collect();
    written
        .iter()
        .filter_map(|f| first_file(f).and_then(|path| by_file.get(path).copied()))
        .collect()
}

/// Appends the rows of `stream` (consumed) as one fragment in one commit.
/// Reports the new version and the fragment's id (none for an empty stream,
/// which commits nothing). The handle moves to the new version.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_append(
    dataset: *const LanceDataset,
    stream: *mut FFI_ArrowArrayStream,
    out_version: *mut u64,
    out_fragment_ids: *mut *mut u64,
    out_fragment_ids_len: *mut usize,
) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let reader = input(stream)?;
        let out_version = out(out_version, "output version")?;
        let dataset = handle.snapshot();
        let timeout = handle.commit_timeout();
        let (committed, ids) = block_on_within(timeout, async move {
            let written = write_uncommitted(dataset.clone(), reader).await?;
            if written.is_empty() {
                return Ok::<_, lance::Error>((dataset, Vec::new()));
            }
            let operation = Operation::Append {
                fragments: written.clone(),
            };
            let committed = commit(dataset, operation, timeout).await?;
            let ids = committed_ids(&committed, &written);
            Ok((committed, ids))
        })?;
        *out_version = committed.version().version;
        handle.advance(committed);
        give_ids(ids, out_fragment_ids, out_fragment_ids_len)
    })
}

/// Writes the rows of `stream` (consumed) as new fragments without
/// committing them; `lance_dataset_commit_update` commits them.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_write_fragments(
    dataset: *const LanceDataset,
    stream: *mut FFI_ArrowArrayStream,
    out_fragments: *mut *mut LanceFragments,
) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let dataset = handle.snapshot();
        let reader = input(stream)?;
        let out_fragments = out(out_fragments, "output fragments")?;
        let fragments = block_on(write_uncommitted(dataset, reader))?;
        *out_fragments = Box::into_raw(Box::new(LanceFragments { fragments }));
        Ok(())
    })
}

/// Frees uncommitted fragments that will not be committed (their files stay
/// until a cleanup removes unreferenced files). NULL is accepted.
#[no_mangle]
pub unsafe extern "C" fn lance_fragments_free(fragments: *mut LanceFragments) {
    if !fragments.is_null() {
        drop(Box::from_raw(fragments));
    }
}

/// Moves the fragments of `src` (consumed; may be NULL) to the end of `dst`,
/// so fragments written by several calls go into one commit.
#[no_mangle]
pub unsafe extern "C" fn lance_fragments_extend(
    dst: *mut LanceFragments,
    src: *mut LanceFragments,
) -> i32 {
    let moved = if src.is_null() {
        Vec::new()
    } else {
        Box::from_raw(src).fragments
    };
    guard(|| {
        let dst = dst
            .as_mut()
            .ok_or_else(|| Failure::invalid("destination fragments is NULL"))?;
        dst.fragments.extend(moved);
        Ok(())
    })
}

/// Takes over the fragments behind `fragments` (NULL: none); the handle is
/// freed.
pub(crate) unsafe fn take_fragments(fragments: *mut LanceFragments) -> Vec<Fragment> {
    if fragments.is_null() {
        Vec::new()
    } else {
        Box::from_raw(fragments).fragments
    }
}

/// An Update that removes the fragments `removed` and adds `added` whole (the
/// rows of both are rewritten, none is changed in place), with `filter` as
/// the key-existence filter of the rows it inserts.
pub(crate) fn rewrite(
    removed: Vec<u64>,
    added: Vec<Fragment>,
    filter: Option<KeyExistenceFilter>,
) -> Operation {
    Operation::Update {
        removed_fragment_ids: removed,
        updated_fragments: Vec::new(),
        new_fragments: added,
        fields_modified: Vec::new(),
        compacted_sstables: Vec::new(),
        fields_for_preserving_frag_bitmap: Vec::new(),
        update_mode: Some(UpdateMode::RewriteRows),
        inserted_rows_filter: filter,
        updated_fragment_offsets: None,
    }
}

/// Commits an Update that removes the fragments `removed_ids` and adds
/// `fragments` (consumed, even on failure; may be NULL for none), read at
/// the handle's version. Appends committed meanwhile are kept; a commit since
/// then that removed or changed one of `removed_ids` makes this one fail with
/// LANCE_CONFLICT (checked on the latest version, see commit.rs). Reports the new version and the ids given to the new
/// fragments, in order. The handle moves to the new version.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_commit_update(
    dataset: *const LanceDataset,
    removed_ids: *const u64,
    removed_ids_len: usize,
    fragments: *mut LanceFragments,
    out_version: *mut u64,
    out_fragment_ids: *mut *mut u64,
    out_fragment_ids_len: *mut usize,
) -> i32 {
    let written = take_fragments(fragments);
    guard(|| {
        let handle = handle(dataset)?;
        let removed = u64s(removed_ids, removed_ids_len, "removed fragment ids")?;
        let out_version = out(out_version, "output version")?;
        let dataset = handle.snapshot();
        let known: HashSet<u64> = dataset.fragments().iter().map(|f| f.id).collect();
        if let Some(missing) = removed.iter().find(|id| !known.contains(id)) {
            return Err(Failure::new(
                crate::error::LANCE_CONFLICT,
                format!(
                    "fragment {missing} is not in version {}",
                    dataset.version().version
                ),
            ));
        }
        let timeout = handle.commit_timeout();
        let (committed, ids) = block_on_within(timeout, async move {
            let operation = rewrite(removed, written.clone(), None);
            let committed = commit(dataset, operation, timeout).await?;
            let ids = committed_ids(&committed, &written);
            Ok::<_, lance::Error>((committed, ids))
        })?;
        *out_version = committed.version().version;
        handle.advance(committed);
        give_ids(ids, out_fragment_ids, out_fragment_ids_len)
    })
}
