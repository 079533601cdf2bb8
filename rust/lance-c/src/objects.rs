//! Small objects beside the datasets: written whole, read whole, listed with
//! their times, deleted in batches.
//!
//! kv0 keeps the announcements of fragments waiting for a shared commit in
//! them (shared.rs). Objects are named by URI, on any store a dataset may
//! live on, with the same storage options.

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::Arc;

use arrow::array::{Int64Array, StringArray};
use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::RecordBatch;
use arrow_schema::{DataType, Field, Schema};
use futures::{stream, StreamExt};
use lance::io::ObjectStore;
use object_store::path::Path;

use crate::dataset::store_params;
use crate::error::{guard, or_absent, Failure, Result};
use crate::ffi::{give_batches, out, storage_options, text, texts, LanceKeyValue};
use crate::runtime::{block_on, process};

/// The object store and path of the directory `dir_uri`, built once per
/// directory and options in a process. Building a store builds an HTTP
/// client, which reads every certificate of the system: several times the
/// CPU of the request it would make. (Lance's registry keeps a store only
/// while someone else holds it.)
pub(crate) async fn directory(
    dir_uri: &str,
    options: HashMap<String, String>,
) -> lance::Result<(Arc<ObjectStore>, Path)> {
    let mut sorted: Vec<(String, String)> = options.clone().into_iter().collect();
    sorted.sort();
    let key = (dir_uri.to_owned(), sorted);
    if let Some(found) = process().directories.lock().unwrap().get(&key) {
        return Ok(found.clone());
    }
    let registry = process().list_registry.clone();
    let built = ObjectStore::from_uri_and_params(registry, dir_uri, &store_params(options)).await?;
    process()
        .directories
        .lock()
        .unwrap()
        .insert(key, built.clone());
    Ok(built)
}

/// The object store and path of the object at `uri`, through its directory.
async fn object(
    uri: &str,
    options: HashMap<String, String>,
) -> lance::Result<(Arc<ObjectStore>, Path)> {
    let (dir, name) = uri.rsplit_once('/').ok_or_else(|| {
        lance::Error::invalid_input(format!("{uri} names no object in a directory"))
    })?;
    let (store, path) = directory(dir, options).await?;
    Ok((store, path.clone().join(name)))
}

/// Writes `text` (NUL-terminated) as the whole object at `uri`, replacing
/// any object there.
#[no_mangle]
pub unsafe extern "C" fn lance_object_put(
    uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
    content: *const c_char,
) -> i32 {
    guard(|| {
        let uri = text(uri, "uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let content = text(content, "content")?.as_bytes().to_vec();
        block_on(async move {
            let (store, path) = object(&uri, options).await?;
            store.put(&path, &content).await?;
            Ok::<_, lance::Error>(())
        })?;
        Ok(())
    })
}

/// Reads the whole object at `uri` as text; free it with `lance_text_free`.
/// LANCE_NOT_FOUND when there is none.
#[no_mangle]
pub unsafe extern "C" fn lance_object_get(
    uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
    out_content: *mut *mut c_char,
) -> i32 {
    guard(|| {
        let uri = text(uri, "uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let out_content = out(out_content, "output content")?;
        let bytes = block_on(async move {
            let (store, path) = object(&uri, options).await?;
            store.read_one_all(&path).await
        })?;
        let content = String::from_utf8(bytes.to_vec())
            .map_err(|_| Failure::new(crate::error::LANCE_CORRUPTION, "object is not UTF-8"))?;
        *out_content = CString::new(content)
            .map_err(|_| Failure::new(crate::error::LANCE_CORRUPTION, "object holds a NUL byte"))?
            .into_raw();
        Ok(())
    })
}

/// Lists the objects directly under the location `dir_uri` as a stream of
/// (name utf8, modified_ms int64: when the store last wrote it, in
/// milliseconds since the Unix epoch by the store's clock), sorted by name.
/// Directories are left out; a location that does not exist has none.
#[no_mangle]
pub unsafe extern "C" fn lance_objects_list(
    dir_uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let uri = text(dir_uri, "directory uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let mut objects: Vec<(String, i64)> = or_absent(block_on(async move {
            let (store, path) = directory(&uri, options).await?;
            let listing = store.list_with_delimiter(Some(&path)).await?;
            Ok::<_, lance::Error>(
                listing
                    .objects
                    .iter()
                    .filter_map(|o| {
                        let name = o.location.filename()?.to_string();
                        Some((name, o.last_modified.timestamp_millis()))
                    })
                    .collect(),
            )
        }))?;
        objects.sort();
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("modified_ms", DataType::Int64, false),
        ]));
        let names = StringArray::from_iter_values(objects.iter().map(|(name, _)| name));
        let times = Int64Array::from_iter_values(objects.iter().map(|(_, ms)| *ms));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(names), Arc::new(times)])?;
        give_batches(schema, vec![batch], out_stream)
    })
}

/// Deletes the objects `names` (`names_len` of them) under the location
/// `dir_uri`, in as few requests as the store allows (S3 takes up to 1,000
/// keys in one). An object already gone is not an error.
#[no_mangle]
pub unsafe extern "C" fn lance_objects_delete(
    dir_uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
    names: *const *const c_char,
    names_len: usize,
) -> i32 {
    guard(|| {
        let uri = text(dir_uri, "directory uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let names = texts(names, names_len, "object name")?;
        if names.is_empty() {
            return Ok(());
        }
        let outcomes: Vec<Result<()>> = block_on(async move {
            let (store, path) = directory(&uri, options).await?;
            let paths: Vec<_> = names
                .iter()
                .map(|name| Ok(path.clone().join(name.as_str())))
                .collect();
            let outcomes = store
                .inner
                .delete_stream(stream::iter(paths).boxed())
                .map(|outcome| {
                    outcome
                        .map(|_| ())
                        .map_err(|e| Failure::from(lance::Error::from(e)))
                })
                .collect::<Vec<_>>()
                .await;
            Ok::<_, lance::Error>(outcomes)
        })?;
        outcomes.into_iter().try_for_each(or_absent)
    })
}
