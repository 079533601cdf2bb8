//! Opening, creating and inspecting datasets: the handle and its metadata.

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{StringArray, TimestampMicrosecondArray, UInt64Array};
use arrow::ffi::FFI_ArrowSchema;
use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::{RecordBatch, RecordBatchIterator};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::transaction::UpdateMapEntry;
use lance::dataset::DEFAULT_INDEX_CACHE_SIZE;
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::io::{ObjectStoreParams, ObjectStoreRegistry, StorageOptionsAccessor};
use lance::session::Session;
use lance::Dataset;

use crate::error::{guard, or_absent, Failure, Result, LANCE_ALREADY_EXISTS};
use crate::ffi::{
    give_batches, key_values, optional_text, out, storage_options, text, LanceKeyValue,
};
use crate::runtime::{block_on, block_on_here};

/// An open dataset at one version. Calls on one handle may come from any
/// thread: each call works on a snapshot of the handle's dataset, and calls
/// that move the handle to a newer version never move it backwards.
pub struct LanceDataset {
    current: Mutex<Dataset>,
    /// Milliseconds a commit through this handle may take; 0: no bound.
    commit_timeout_ms: AtomicU64,
}

impl LanceDataset {
    pub fn new(dataset: Dataset) -> Self {
        LanceDataset {
            current: Mutex::new(dataset),
            commit_timeout_ms: AtomicU64::new(0),
        }
    }

    /// How long a commit through this handle may take.
    pub fn commit_timeout(&self) -> Option<Duration> {
        match self.commit_timeout_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// A cheap copy of the dataset at the handle's version.
    pub fn snapshot(&self) -> Dataset {
        self.current.lock().unwrap().clone()
    }

    /// Moves the handle to `dataset` unless it already holds a newer version.
    pub fn advance(&self, dataset: Dataset) {
        let mut current = self.current.lock().unwrap();
        if dataset.version().version >= current.version().version {
            *current = dataset;
        }
    }
}

/// Borrows the handle behind a C pointer.
pub fn handle<'a>(ptr: *const LanceDataset) -> Result<&'a LanceDataset> {
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::invalid("dataset handle must not be NULL"))
}

/// Bytes of Lance's metadata cache per dataset handle. Lance's default, 1
/// GiB, fills up in a writer that lives long: every commit caches its manifest
/// and transaction (about 15 KiB each for a small table), so a handle grew by
/// a GiB over 70,000 commits. This holds the file and fragment metadata of
/// tables far larger than kv0's and a few thousand recent versions.
const METADATA_CACHE_BYTES: usize = 128 << 20;

/// A session of its own for each opened or created dataset, as Lance's
/// default, with the metadata cache bounded.
fn new_session() -> Arc<Session> {
    Arc::new(Session::new(
        DEFAULT_INDEX_CACHE_SIZE,
        METADATA_CACHE_BYTES,
        Arc::new(ObjectStoreRegistry::default()),
    ))
}

pub(crate) fn store_params(options: HashMap<String, String>) -> ObjectStoreParams {
    ObjectStoreParams {
        storage_options_accessor: Some(Arc::new(StorageOptionsAccessor::with_static_options(
            options,
        ))),
        ..Default::default()
    }
}

async fn load(
    uri: String,
    options: HashMap<String, String>,
    version: u64,
    tag: Option<String>,
) -> lance::Result<Dataset> {
    let mut builder = DatasetBuilder::from_uri(&uri)
        .with_storage_options(options)
        .with_session(new_session());
    if version != 0 {
        builder = builder.with_version(version);
    }
    if let Some(tag) = &tag {
        builder = builder.with_tag(tag);
    }
    builder.load().await
}

/// Opens the dataset at `uri`: the latest version when `version` is 0 and
/// `tag` is NULL, else that version or that tag.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_open(
    uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
    version: u64,
    tag: *const c_char,
    out_dataset: *mut *mut LanceDataset,
) -> i32 {
    guard(|| {
        let uri = text(uri, "uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let tag = optional_text(tag, "tag")?.map(str::to_owned);
        let out_dataset = out(out_dataset, "output dataset")?;
        let dataset = block_on(load(uri, options, version, tag))?;
        *out_dataset = Box::into_raw(Box::new(LanceDataset::new(dataset)));
        Ok(())
    })
}

/// Writes version 1 of a new, empty dataset. Lance's own create checks for
/// an existing dataset before it commits, and a commit that then finds one
/// turns into an overwrite of it, losing rows another writer appended. With
/// no retries the commit of an overwrite is strict: it fails instead.
async fn create_empty(
    uri: &str,
    schema: Arc<Schema>,
    params: &WriteParams,
) -> lance::Result<Dataset> {
    let empty = RecordBatchIterator::new(Vec::<arrow::error::Result<RecordBatch>>::new(), schema);
    let transaction = InsertBuilder::new(uri)
        .with_params(params)
        .execute_uncommitted_stream(empty)
        .await?;
    let mut commit = CommitBuilder::new(uri)
        .with_session(new_session())
        .with_max_retries(0)
        .enable_v2_manifest_paths(params.enable_v2_manifest_paths)
        .with_storage_format(params.data_storage_version.unwrap_or_default());
    if let Some(store) = &params.store_params {
        commit = commit.with_store_params(store.clone());
    }
    commit.execute(transaction).await
}

/// Creates an empty dataset with `schema` (borrowed: the caller still
/// releases it). Fails with LANCE_ALREADY_EXISTS if one is there. Lance's
/// automatic cleanup stays off: it would run inside commits.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_create(
    uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
    schema: *const FFI_ArrowSchema,
    out_dataset: *mut *mut LanceDataset,
) -> i32 {
    guard(|| {
        let uri = text(uri, "uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let schema = schema
            .as_ref()
            .ok_or_else(|| Failure::invalid("schema must not be NULL"))?;
        let schema = Arc::new(Schema::try_from(schema)?);
        let out_dataset = out(out_dataset, "output dataset")?;
        let write_params = WriteParams {
            mode: WriteMode::Create,
            store_params: Some(store_params(options.clone())),
            ..Default::default()
        };
        let dataset = block_on(async move {
            match create_empty(&uri, schema, &write_params).await {
                Ok(dataset) => Ok(dataset),
                // Whatever the error, a dataset that is there now was created
                // by someone else: say so, so that the caller can open it.
                Err(err) => match load(uri.clone(), options, 0, None).await {
                    Ok(_) => Err(Failure::new(
                        LANCE_ALREADY_EXISTS,
                        format!("dataset {uri} already exists"),
                    )),
                    Err(_) => Err(Failure::from(err)),
                },
            }
        })?;
        *out_dataset = Box::into_raw(Box::new(LanceDataset::new(dataset)));
        Ok(())
    })
}

/// Sets `*out_exists` to whether a dataset is stored at `uri`.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_exists(
    uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
    out_exists: *mut bool,
) -> i32 {
    guard(|| {
        let uri = text(uri, "uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let out_exists = out(out_exists, "output flag")?;
        *out_exists = or_absent(block_on(load(uri, options, 0, None)).map(|_| true))?;
        Ok(())
    })
}

/// The names of the immediate children of the location `uri` (files and
/// directories, or common prefixes on object stores), unsorted; none when it
/// does not exist.
pub(crate) fn list_names(uri: String, options: HashMap<String, String>) -> Result<Vec<String>> {
    or_absent(block_on(async move {
        let (store, path) = crate::objects::directory(&uri, options).await?;
        store.read_dir(path).await
    }))
}

/// Lists the names of the immediate children of the location `uri` (files
/// and directories, or common prefixes on object stores) as a stream of
/// (name utf8), sorted. A location that does not exist has no children.
#[no_mangle]
pub unsafe extern "C" fn lance_list_dir(
    uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let uri = text(uri, "uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let mut names = list_names(uri, options)?;
        names.sort();
        names.dedup();
        let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, false)]));
        let column = StringArray::from_iter_values(names.iter());
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(column)])?;
        give_batches(schema, vec![batch], out_stream)
    })
}

/// Closes a handle. NULL is accepted.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_free(dataset: *mut LanceDataset) {
    if !dataset.is_null() {
        drop(Box::from_raw(dataset));
    }
}

/// A second handle at the handle's version, sharing its object store (so it
/// also works for memory:// datasets) and moving independently of it. The
/// commit timeout is not copied.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_clone(
    dataset: *const LanceDataset,
    out_dataset: *mut *mut LanceDataset,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let out_dataset = out(out_dataset, "output dataset")?;
        *out_dataset = Box::into_raw(Box::new(LanceDataset::new(dataset)));
        Ok(())
    })
}

/// The version the handle reads.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_version(dataset: *const LanceDataset) -> u64 {
    handle(dataset)
        .map(|d| d.snapshot().version().version)
        .unwrap_or(0)
}

/// The newest version in storage, found without loading it.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_latest_version(
    dataset: *const LanceDataset,
    out_version: *mut u64,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let out_version = out(out_version, "output version")?;
        *out_version = block_on_here(async move { dataset.latest_version_id().await })?;
        Ok(())
    })
}

/// Moves the handle to the newest version in storage.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_checkout_latest(dataset: *const LanceDataset) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let mut dataset = handle.snapshot();
        let dataset =
            block_on_here(async move { dataset.checkout_latest().await.map(|_| dataset) })?;
        handle.advance(dataset);
        Ok(())
    })
}

/// Lists the stored versions as a stream of (version uint64, timestamp
/// timestamp[us, UTC]).
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_versions(
    dataset: *const LanceDataset,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let versions = block_on(async move { dataset.versions().await })?;
        let schema = Arc::new(Schema::new(vec![
            Field::new("version", DataType::UInt64, false),
            Field::new(
                "timestamp",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
        ]));
        let numbers = UInt64Array::from_iter_values(versions.iter().map(|v| v.version));
        let times = TimestampMicrosecondArray::from_iter_values(
            versions.iter().map(|v| v.timestamp.timestamp_micros()),
        )
        .with_timezone("UTC");
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(numbers), Arc::new(times)])?;
        give_batches(schema, vec![batch], out_stream)
    })
}

/// The oldest stored version that no tag names, and its commit time in
/// microseconds since the Unix epoch: a listing of the versions and one
/// manifest read, where `lance_dataset_versions` reads every manifest.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_oldest_version(
    dataset: *const LanceDataset,
    out_version: *mut u64,
    out_timestamp_us: *mut i64,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let out_version = out(out_version, "output version")?;
        let out_timestamp_us = out(out_timestamp_us, "output timestamp")?;
        let (version, timestamp) = block_on(async move {
            let tagged: Vec<u64> = dataset
                .tags()
                .list()
                .await?
                .values()
                .map(|tag| tag.version)
                .collect();
            let oldest = dataset
                .version_refs()
                .await?
                .into_iter()
                .map(|r| r.version)
                .find(|v| !tagged.contains(v))
                .unwrap_or(dataset.version().version);
            let at = dataset.checkout_version(oldest).await?;
            Ok::<_, lance::Error>((oldest, at.version().timestamp.timestamp_micros()))
        })?;
        *out_version = version;
        *out_timestamp_us = timestamp;
        Ok(())
    })
}

/// Lists the fragments of the handle's version as a stream of (id uint64,
/// data_file utf8, physical_rows uint64, deletion_file utf8?, deleted_rows
/// uint64). data_file is the fragment's first data file, which Lance names
/// uniquely, so (id, data_file, deletion_file) identifies a fragment's
/// contents.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_fragments(
    dataset: *const LanceDataset,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let fragments = dataset.fragments();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::UInt64, false),
            Field::new("data_file", DataType::Utf8, false),
            Field::new("physical_rows", DataType::UInt64, false),
            Field::new("deletion_file", DataType::Utf8, true),
            Field::new("deleted_rows", DataType::UInt64, false),
        ]));
        let ids = UInt64Array::from_iter_values(fragments.iter().map(|f| f.id));
        let files = StringArray::from_iter_values(
            fragments
                .iter()
                .map(|f| f.files.first().map(|d| d.path.clone()).unwrap_or_default()),
        );
        let rows = UInt64Array::from_iter_values(
            fragments
                .iter()
                .map(|f| f.physical_rows.unwrap_or(0) as u64),
        );
        let deletions = StringArray::from_iter(fragments.iter().map(|f| {
            f.deletion_file
                .as_ref()
                .map(|d| format!("{}-{}", d.read_version, d.id))
        }));
        let deleted = UInt64Array::from_iter_values(fragments.iter().map(|f| {
            f.deletion_file
                .as_ref()
                .and_then(|d| d.num_deleted_rows)
                .unwrap_or(0) as u64
        }));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(ids),
                Arc::new(files),
                Arc::new(rows),
                Arc::new(deletions),
                Arc::new(deleted),
            ],
        )?;
        give_batches(schema, vec![batch], out_stream)
    })
}

/// Exports the dataset's schema into `out_schema` (the caller releases it).
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_schema(
    dataset: *const LanceDataset,
    out_schema: *mut FFI_ArrowSchema,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        if out_schema.is_null() {
            return Err(Failure::invalid("output schema must not be NULL"));
        }
        let schema = Schema::from(dataset.schema());
        std::ptr::write(out_schema, FFI_ArrowSchema::try_from(&schema)?);
        Ok(())
    })
}

/// Counts the rows of the handle's version that match `filter` (an SQL
/// predicate; NULL counts every row).
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_count_rows(
    dataset: *const LanceDataset,
    filter: *const c_char,
    out_count: *mut u64,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let filter = optional_text(filter, "filter")?.map(str::to_owned);
        let out_count = out(out_count, "output count")?;
        *out_count = block_on(async move { dataset.count_rows(filter).await })? as u64;
        Ok(())
    })
}

/// Which of a dataset's string maps a call reads or writes.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(dead_code)] // the variants come from C
pub enum LanceMapKind {
    /// The dataset configuration (manifest config).
    Config = 0,
    /// The table metadata.
    Metadata = 1,
}

/// Reads a string map of the handle's version as a stream of (key utf8,
/// value utf8), sorted by key.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_map(
    dataset: *const LanceDataset,
    kind: LanceMapKind,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let map = match kind {
            LanceMapKind::Config => dataset.config(),
            LanceMapKind::Metadata => dataset.metadata(),
        };
        let mut entries: Vec<(&String, &String)> = map.iter().collect();
        entries.sort();
        let schema = Arc::new(Schema::new(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Utf8, false),
        ]));
        let keys = StringArray::from_iter_values(entries.iter().map(|e| e.0));
        let values = StringArray::from_iter_values(entries.iter().map(|e| e.1));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(keys), Arc::new(values)])?;
        give_batches(schema, vec![batch], out_stream)
    })
}

/// Sets (or, where a value is NULL, removes) keys of a string map in one
/// commit, and moves the handle to that commit.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_update_map(
    dataset: *const LanceDataset,
    kind: LanceMapKind,
    entries: *const LanceKeyValue,
    entries_len: usize,
) -> i32 {
    guard(|| {
        let handle = handle(dataset)?;
        let mut dataset = handle.snapshot();
        let entries: Vec<UpdateMapEntry> = key_values(entries, entries_len)?
            .into_iter()
            .map(UpdateMapEntry::from)
            .collect();
        let dataset = block_on(async move {
            match kind {
                LanceMapKind::Config => dataset.update_config(entries).await?,
                LanceMapKind::Metadata => dataset.update_metadata(entries).await?,
            };
            Ok::<_, lance::Error>(dataset)
        })?;
        handle.advance(dataset);
        Ok(())
    })
}

/// Bounds every later commit through the handle (appends, updates, deletes,
/// added columns) to `milliseconds`; 0 lifts the bound. A commit that takes
/// longer fails with `LANCE_TIMEOUT`. Writing uncommitted fragments and
/// compaction, which rewrite data of any size, are not bounded.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_set_commit_timeout(
    dataset: *const LanceDataset,
    milliseconds: u64,
) -> i32 {
    guard(|| {
        handle(dataset)?
            .commit_timeout_ms
            .store(milliseconds, Ordering::Relaxed);
        Ok(())
    })
}
