//! Conversions between C arguments and Rust values.

use std::ffi::{c_char, CStr};

use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_schema::SchemaRef;

use crate::error::{Failure, Result};

/// One key and its value; `value` may be NULL where a call says so (for
/// example to delete a configuration key).
#[repr(C)]
pub struct LanceKeyValue {
    pub key: *const c_char,
    pub value: *const c_char,
}

/// Reads a required UTF-8 string argument.
pub unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} must not be NULL")));
    }
    CStr::from_ptr(ptr)
        .to_str()
        .map_err(|_| Failure::invalid(format!("{what} is not valid UTF-8")))
}

/// Reads an optional UTF-8 string argument (NULL means none).
pub unsafe fn optional_text<'a>(ptr: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if ptr.is_null() {
        Ok(None)
    } else {
        text(ptr, what).map(Some)
    }
}

/// Reads `len` strings.
pub unsafe fn texts(ptr: *const *const c_char, len: usize, what: &str) -> Result<Vec<String>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} must not be NULL")));
    }
    std::slice::from_raw_parts(ptr, len)
        .iter()
        .map(|&p| text(p, what).map(str::to_owned))
        .collect()
}

/// Reads `len` key/value pairs; values may be NULL.
pub unsafe fn key_values(
    ptr: *const LanceKeyValue,
    len: usize,
) -> Result<Vec<(String, Option<String>)>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if ptr.is_null() {
        return Err(Failure::invalid("key/value array must not be NULL"));
    }
    std::slice::from_raw_parts(ptr, len)
        .iter()
        .map(|kv| {
            let key = text(kv.key, "key")?.to_owned();
            let value = optional_text(kv.value, "value")?.map(str::to_owned);
            Ok((key, value))
        })
        .collect()
}

/// Reads storage options: every value must be present.
pub unsafe fn storage_options(
    ptr: *const LanceKeyValue,
    len: usize,
) -> Result<std::collections::HashMap<String, String>> {
    key_values(ptr, len)?
        .into_iter()
        .map(|(k, v)| match v {
            Some(v) => Ok((k, v)),
            None => Err(Failure::invalid(format!("storage option {k} has no value"))),
        })
        .collect()
}

/// Reads `len` unsigned 64-bit numbers.
pub unsafe fn u64s(ptr: *const u64, len: usize, what: &str) -> Result<Vec<u64>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} must not be NULL")));
    }
    Ok(std::slice::from_raw_parts(ptr, len).to_vec())
}

/// Checks an output pointer.
pub fn out<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T> {
    unsafe { ptr.as_mut() }.ok_or_else(|| Failure::invalid(format!("{what} must not be NULL")))
}

/// Hands a list of numbers to the caller, who frees it with `lance_ids_free`.
pub fn give_ids(ids: Vec<u64>, out_ids: *mut *mut u64, out_len: *mut usize) -> Result<()> {
    let out_ids = out(out_ids, "output id array")?;
    let out_len = out(out_len, "output id count")?;
    let boxed = ids.into_boxed_slice();
    *out_len = boxed.len();
    *out_ids = Box::into_raw(boxed) as *mut u64;
    Ok(())
}

/// Frees a list returned by this crate. NULL is accepted.
#[no_mangle]
pub unsafe extern "C" fn lance_ids_free(ids: *mut u64, len: usize) {
    if !ids.is_null() {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(ids, len)));
    }
}

/// Exports batches as a C stream into `out` (which the caller releases).
pub fn give_batches(
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    out_stream: *mut FFI_ArrowArrayStream,
) -> Result<()> {
    let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    give_reader(Box::new(reader), out_stream)
}

/// Exports a reader as a C stream into `out` (which the caller releases).
pub fn give_reader(
    reader: Box<dyn RecordBatchReader + Send>,
    out_stream: *mut FFI_ArrowArrayStream,
) -> Result<()> {
    if out_stream.is_null() {
        return Err(Failure::invalid("output stream must not be NULL"));
    }
    unsafe { std::ptr::write(out_stream, FFI_ArrowArrayStream::new(reader)) };
    Ok(())
}
