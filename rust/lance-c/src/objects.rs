//! Small objects beside the datasets: written whole, read whole, deleted.
//!
//! kv0 keeps the announcements of fragments waiting for a shared commit in
//! them (shared.rs). Each call names one object by its URI, on any store a
//! dataset may live on, with the same storage options.

use std::ffi::{c_char, CString};

use lance::io::ObjectStore;

use crate::dataset::store_params;
use crate::error::{guard, Failure, Result, LANCE_NOT_FOUND};
use crate::ffi::{out, storage_options, text, LanceKeyValue};
use crate::runtime::{block_on, process};

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
            let registry = process().list_registry.clone();
            let (store, path) =
                ObjectStore::from_uri_and_params(registry, &uri, &store_params(options)).await?;
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
            let registry = process().list_registry.clone();
            let (store, path) =
                ObjectStore::from_uri_and_params(registry, &uri, &store_params(options)).await?;
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

/// Deletes the object at `uri`; an object already gone is not an error.
#[no_mangle]
pub unsafe extern "C" fn lance_object_delete(
    uri: *const c_char,
    options: *const LanceKeyValue,
    options_len: usize,
) -> i32 {
    guard(|| {
        let uri = text(uri, "uri")?.to_owned();
        let options = storage_options(options, options_len)?;
        let deleted: Result<()> = block_on(async move {
            let registry = process().list_registry.clone();
            let (store, path) =
                ObjectStore::from_uri_and_params(registry, &uri, &store_params(options)).await?;
            store.delete(&path).await
        })
        .map_err(Failure::from);
        match deleted {
            Err(failure) if failure.code != LANCE_NOT_FOUND => Err(failure),
            _ => Ok(()),
        }
    })
}
