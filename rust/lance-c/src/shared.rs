//! Commits of fragments that any of several writers may commit.
//!
//! kv0's writers announce the fragments a flush wrote in small objects, and a
//! writer that commits takes every announced fragment it finds, its own and
//! others' (kv0's src/tracking/shared_commits.h has the protocol). Lance
//! rebases an Append onto whatever was committed after the version it read,
//! so two writers that both saw a fragment waiting could both commit it. A
//! shared commit is therefore an Update that adds fragments, removes none,
//! and carries a key-existence filter holding one constant key: Lance's
//! conflict check refuses such an Update when an Append or an Update was
//! committed after the version it read (lance 14.0.2, conflict_resolver.rs,
//! `check_update_txn`), and every shared commit is one. Of two writers that
//! read versions before either committed, only the first commits; the other
//! fails with LANCE_CONFLICT, reads the new version and finds the fragments
//! there.

use std::collections::HashSet;
use std::ffi::{c_char, CString};
use std::sync::Arc;

use arrow::array::StringArray;
use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::RecordBatch;
use arrow_schema::{DataType, Field, Schema};
use lance::dataset::transaction::Transaction;
use lance_table::format::key_existence::{FilterType, KeyExistenceFilter};
use lance_table::format::Fragment;

use crate::commit;
use crate::dataset::handle;
use crate::error::{guard, Failure};
use crate::ffi::{give_batches, give_ids, out, text};
use crate::runtime::block_on_within;
use crate::write::{committed_ids, rewrite, take_fragments, LanceFragments};

/// The one key every shared commit's filter holds, so that any two filters
/// intersect. Its value means nothing.
const SHARED_KEY_HASH: u64 = 0x6b76_3073_6861_7265;

fn shared_filter() -> KeyExistenceFilter {
    KeyExistenceFilter {
        field_ids: vec![0],
        filter: FilterType::ExactSet(HashSet::from([SHARED_KEY_HASH])),
    }
}

/// Commits `fragments` (consumed, even on failure) as a shared commit read at
/// the handle's version. Fails with LANCE_CONFLICT, committing nothing, when
/// an append or an update was committed after that version. Reports the new
/// version and the ids given to the fragments, in order; the handle moves to
/// the new version.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_commit_shared(
    dataset: *const crate::dataset::LanceDataset,
    fragments: *mut LanceFragments,
    out_version: *mut u64,
    out_fragment_ids: *mut *mut u64,
    out_fragment_ids_len: *mut usize,
) -> i32 {
    let written = take_fragments(fragments);
    guard(|| {
        let handle = handle(dataset)?;
        let out_version = out(out_version, "output version")?;
        if written.is_empty() {
            return Err(Failure::invalid("a shared commit needs fragments"));
        }
        let read = handle.snapshot();
        let timeout = handle.commit_timeout();
        let (committed, ids) = block_on_within(timeout, async move {
            let operation = rewrite(Vec::new(), written.clone(), Some(shared_filter()));
            let transaction = Transaction::new(read.version().version, operation, None);
            let committed = commit::builder(read, timeout).execute(transaction).await?;
            let ids = committed_ids(&committed, &written);
            Ok::<_, lance::Error>((committed, ids))
        })?;
        *out_version = committed.version().version;
        handle.advance(committed);
        give_ids(ids, out_fragment_ids, out_fragment_ids_len)
    })
}

/// The fragments' Lance metadata as JSON, for `lance_fragments_from_json`;
/// free it with `lance_text_free`.
#[no_mangle]
pub unsafe extern "C" fn lance_fragments_to_json(
    fragments: *const LanceFragments,
    out_json: *mut *mut c_char,
) -> i32 {
    guard(|| {
        let fragments = fragments
            .as_ref()
            .ok_or_else(|| Failure::invalid("fragments is NULL"))?;
        let out_json = out(out_json, "output text")?;
        let json = serde_json::to_string(&fragments.fragments)
            .map_err(|e| Failure::invalid(format!("fragments do not serialize: {e}")))?;
        *out_json = CString::new(json)
            .map_err(|_| Failure::invalid("fragment metadata holds a NUL byte"))?
            .into_raw();
        Ok(())
    })
}

/// Fragments from the JSON `lance_fragments_to_json` made.
#[no_mangle]
pub unsafe extern "C" fn lance_fragments_from_json(
    json: *const c_char,
    out_fragments: *mut *mut LanceFragments,
) -> i32 {
    guard(|| {
        let json = text(json, "fragment metadata")?;
        let out_fragments = out(out_fragments, "output fragments")?;
        let fragments: Vec<Fragment> = serde_json::from_str(json).map_err(|e| {
            Failure::new(
                crate::error::LANCE_CORRUPTION,
                format!("fragment metadata does not parse: {e}"),
            )
        })?;
        *out_fragments = Box::into_raw(Box::new(LanceFragments { fragments }));
        Ok(())
    })
}

/// The first data file of each fragment, in order, as a stream of (name
/// utf8): the names Lance gave them, unique to each fragment.
#[no_mangle]
pub unsafe extern "C" fn lance_fragments_data_files(
    fragments: *const LanceFragments,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let fragments = fragments
            .as_ref()
            .ok_or_else(|| Failure::invalid("fragments is NULL"))?;
        let names: Vec<&str> = fragments
            .fragments
            .iter()
            .map(|f| f.files.first().map(|d| d.path.as_str()).unwrap_or(""))
            .collect();
        let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, false)]));
        let column = StringArray::from_iter_values(names);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(column)])?;
        give_batches(schema, vec![batch], out_stream)
    })
}

/// Frees text this crate returned. NULL is accepted.
#[no_mangle]
pub unsafe extern "C" fn lance_text_free(text: *mut c_char) {
    if !text.is_null() {
        drop(CString::from_raw(text));
    }
}
