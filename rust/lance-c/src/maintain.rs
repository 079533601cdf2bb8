//! Keeping a dataset in shape: compaction, deletes, schema growth, indices,
//! tags and version cleanup.

use std::collections::HashSet;
use std::ffi::c_char;
use std::sync::Arc;

use arrow::array::{StringArray, UInt64Array};
use arrow::ffi::FFI_ArrowSchema;
use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::RecordBatch;
use arrow_schema::{DataType, Field, Schema};
use lance::dataset::index::DatasetIndexRemapperOptions;
use lance::dataset::optimize::{commit_compaction, plan_compaction, CompactionOptions};
use lance::dataset::NewColumnTransform;
use lance::index::DatasetIndexExt;
use lance_index::optimize::OptimizeOptions;
use lance_index::scalar::ScalarIndexParams;
use lance_index::IndexType;

use crate::dataset::{handle, list_names, LanceDataset};
use crate::error::{guard, Failure};
use crate::ffi::{
    give_batches, give_ids, optional_text, out, storage_options, text, LanceKeyValue,
};
use crate::runtime::{block_on, block_on_within};

/// How `lance_dataset_compact` merges fragments.
#[repr(C)]
pub struct LanceCompactOptions {
    /// Rows a merged fragment aims for; 0 leaves Lance's default.
    pub target_rows_per_fragment: usize,
    /// Rewrite fragments whose share of deleted rows exceeds the threshold,
    /// dropping those rows from storage.
    pub materialize_deletions: bool,
    pub materialize_deletions_threshold: f32,
}

/// Merges small fragments of the latest version with Lance's compaction (a
/// Rewrite commit; rows are unchanged but move to new addresses). Reports the ids of the
/// fragments it replaced and of those it added; both are empty when there
/// was nothing to do. The handle moves to the new version.
///
/// With `protected_dir` (a location URI, with `storage` its options), no
/// fragment whose first data file names an object there is touched: the
/// directory is listed after the latest version is loaded, so a fragment
/// in that version whose name was listed is left as it is (kv0's
/// announcements of fragments waiting for a shared commit, shared.rs).
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_compact(
    dataset: *const LanceDataset,
    options: *const LanceCompactOptions,
    protected_dir: *const c_char,
    storage: *const LanceKeyValue,
    storage_len: usize,
    out_removed_ids: *mut *mut u64,
    out_removed_ids_len: *mut usize,
    out_added_ids: *mut *mut u64,
    out_added_ids_len: *mut usize,
) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let options = options
            .as_ref()
            .ok_or_else(|| Failure::invalid("compaction options must not be NULL"))?;
        let mut lance_options = CompactionOptions {
            materialize_deletions: options.materialize_deletions,
            materialize_deletions_threshold: options.materialize_deletions_threshold,
            ..Default::default()
        };
        if options.target_rows_per_fragment > 0 {
            lance_options.target_rows_per_fragment = options.target_rows_per_fragment;
        }
        let protected_dir = optional_text(protected_dir, "protected directory")?.map(str::to_owned);
        let storage = storage_options(storage, storage_len)?;
        // Planned on the latest version: Lance rebases a compaction across
        // the versions since its plan, which a cleanup may have removed.
        let mut dataset = handle.snapshot();
        let dataset = block_on(async move {
            dataset.checkout_latest().await?;
            Ok::<_, lance::Error>(dataset)
        })?;
        let protected = match &protected_dir {
            Some(uri) => list_names(uri.clone(), storage)?.into_iter().collect(),
            None => HashSet::new(),
        };
        let (dataset, removed, added) = block_on(async move {
            let mut dataset = dataset;
            let mut plan = plan_compaction(&dataset, &lance_options).await?;
            plan.tasks.retain(|task| {
                !task
                    .fragments
                    .iter()
                    .any(|f| f.files.first().is_some_and(|d| protected.contains(&d.path)))
            });
            let mut results = Vec::with_capacity(plan.num_tasks());
            for task in plan.compaction_tasks() {
                results.push(task.execute(&dataset).await?);
            }
            let removed: Vec<u64> = results
                .iter()
                .flat_map(|r| r.original_fragments.iter().map(|f| f.id))
                .collect();
            let new_files: HashSet<String> = results
                .iter()
                .flat_map(|r| r.new_fragments.iter())
                .filter_map(|f| f.files.first().map(|d| d.path.clone()))
                .collect();
            if !results.is_empty() {
                let remap = Arc::new(DatasetIndexRemapperOptions::default());
                commit_compaction(&mut dataset, results, remap, &lance_options).await?;
            }
            let added: Vec<u64> = dataset
                .fragments()
                .iter()
                .filter(|f| f.files.first().is_some_and(|d| new_files.contains(&d.path)))
                .map(|f| f.id)
                .collect();
            Ok::<_, lance::Error>((dataset, removed, added))
        })?;
        handle.advance(dataset);
        give_ids(removed, out_removed_ids, out_removed_ids_len)?;
        give_ids(added, out_added_ids, out_added_ids_len)
    })
}

/// Deletes the rows matching `predicate` (SQL) in the latest version, in one
/// commit.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_delete(
    dataset: *const LanceDataset,
    predicate: *const c_char,
) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let predicate = text(predicate, "predicate")?.to_owned();
        let mut dataset = handle.snapshot();
        let dataset = block_on_within(handle.commit_timeout(), async move {
            // As compaction: the fewer versions a delete rebases across, the
            // fewer a cleanup can hide from it.
            dataset.checkout_latest().await?;
            dataset.delete(&predicate).await?;
            Ok::<_, lance::Error>(dataset)
        })?;
        handle.advance(dataset);
        Ok(())
    })
}

/// Adds the columns of `schema` (borrowed; every field must be nullable) as
/// all-null columns, a commit that rewrites no data.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_add_null_columns(
    dataset: *const LanceDataset,
    schema: *const FFI_ArrowSchema,
) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let schema = schema
            .as_ref()
            .ok_or_else(|| Failure::invalid("schema must not be NULL"))?;
        let schema = Schema::try_from(schema)?;
        if let Some(field) = schema.fields().iter().find(|f| !f.is_nullable()) {
            return Err(Failure::invalid(format!(
                "column {} must be nullable to be added without data",
                field.name()
            )));
        }
        let mut dataset = handle.snapshot();
        let dataset = block_on_within(handle.commit_timeout(), async move {
            let transform = NewColumnTransform::AllNulls(Arc::new(schema));
            dataset.add_columns(transform, None, None).await?;
            Ok::<_, lance::Error>(dataset)
        })?;
        handle.advance(dataset);
        Ok(())
    })
}

/// Creates a scalar index named `name` on `column` of type `index_type`
/// ("BTREE" or "ZONEMAP"), or, when it exists, extends it to the fragments
/// added since it was built.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_create_scalar_index(
    dataset: *const LanceDataset,
    column: *const c_char,
    name: *const c_char,
    index_type: *const c_char,
) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let column = text(column, "column")?.to_owned();
        let name = text(name, "index name")?.to_owned();
        let index_type = match text(index_type, "index type")? {
            "BTREE" => IndexType::BTree,
            "ZONEMAP" => IndexType::ZoneMap,
            other => return Err(Failure::invalid(format!("unknown index type {other}"))),
        };
        let mut dataset = handle.snapshot();
        let dataset = block_on(async move {
            let existing = dataset.load_indices_by_name(&name).await?;
            if existing.is_empty() {
                let params = ScalarIndexParams::default();
                dataset
                    .create_index(&[column.as_str()], index_type, Some(name), &params, false)
                    .await?;
            } else {
                let mut options = OptimizeOptions::default();
                options.index_names = Some(vec![name]);
                dataset.optimize_indices(&options).await?;
            }
            Ok::<_, lance::Error>(dataset)
        })?;
        handle.advance(dataset);
        Ok(())
    })
}

/// Drops the index named `name` in one commit; LANCE_NOT_FOUND if there is
/// none.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_drop_index(
    dataset: *const LanceDataset,
    name: *const c_char,
) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let name = text(name, "index name")?.to_owned();
        let mut dataset = handle.snapshot();
        let dataset = block_on_within(handle.commit_timeout(), async move {
            dataset.drop_index(&name).await?;
            Ok::<_, lance::Error>(dataset)
        })?;
        handle.advance(dataset);
        Ok(())
    })
}

/// Lists the dataset's indices as a stream of (name utf8, column utf8).
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_indices(
    dataset: *const LanceDataset,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let indices = block_on(async move {
            let indices = dataset.load_indices().await?;
            let named: Vec<(String, String)> = indices
                .iter()
                .filter(|i| !lance_index::is_system_index(i))
                .map(|i| {
                    let column = i
                        .fields
                        .first()
                        .and_then(|&id| dataset.schema().field_by_id(id))
                        .map(|f| f.name.clone())
                        .unwrap_or_default();
                    (i.name.clone(), column)
                })
                .collect();
            Ok::<_, lance::Error>(named)
        })?;
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("column", DataType::Utf8, false),
        ]));
        let names = StringArray::from_iter_values(indices.iter().map(|i| &i.0));
        let columns = StringArray::from_iter_values(indices.iter().map(|i| &i.1));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(names), Arc::new(columns)])?;
        give_batches(schema, vec![batch], out_stream)
    })
}

/// Names `version` with `tag`. Fails with LANCE_ALREADY_EXISTS if the tag
/// exists, LANCE_NOT_FOUND if the version does not.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_tag_create(
    dataset: *const LanceDataset,
    tag: *const c_char,
    version: u64,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let tag = text(tag, "tag")?.to_owned();
        block_on(async move { dataset.tags().create(&tag, version).await })?;
        Ok(())
    })
}

/// Removes `tag`. Fails with LANCE_NOT_FOUND if there is no such tag.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_tag_delete(
    dataset: *const LanceDataset,
    tag: *const c_char,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let tag = text(tag, "tag")?.to_owned();
        block_on(async move { dataset.tags().delete(&tag).await })?;
        Ok(())
    })
}

/// Lists the tags as a stream of (name utf8, version uint64), sorted by name.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_tags(
    dataset: *const LanceDataset,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let tags = block_on(async move { dataset.tags().list().await })?;
        let mut tags: Vec<(String, u64)> = tags.into_iter().map(|(n, c)| (n, c.version)).collect();
        tags.sort();
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("version", DataType::UInt64, false),
        ]));
        let names = StringArray::from_iter_values(tags.iter().map(|t| &t.0));
        let versions = UInt64Array::from_iter_values(tags.iter().map(|t| t.1));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(names), Arc::new(versions)])?;
        give_batches(schema, vec![batch], out_stream)
    })
}

/// What a cleanup removed.
#[repr(C)]
#[derive(Default)]
pub struct LanceCleanupStats {
    pub old_versions: u64,
    pub bytes_removed: u64,
}

/// Removes versions older than `older_than_seconds` (never the handle's
/// version, never a tagged one) and the files only they used. With
/// `error_if_tagged` set, a tagged version old enough to be removed makes the
/// call fail instead.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_cleanup(
    dataset: *const LanceDataset,
    older_than_seconds: i64,
    error_if_tagged: bool,
    out_stats: *mut LanceCleanupStats,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let out_stats = out(out_stats, "output stats")?;
        let stats = block_on(async move {
            dataset
                .cleanup_old_versions(
                    chrono::TimeDelta::seconds(older_than_seconds),
                    Some(false),
                    Some(error_if_tagged),
                )
                .await
        })?;
        *out_stats = LanceCleanupStats {
            old_versions: stats.old_versions,
            bytes_removed: stats.bytes_removed,
        };
        Ok(())
    })
}
