//! lance-c: a small, generic C ABI over Lance datasets.
//!
//! It knows nothing of the schemas its host stores. Data crosses as the
//! Arrow C Data Interface; every function returns a status code (LANCE_OK or
//! one of the LANCE_* codes) and leaves a message for `lance_last_error`; no
//! panic crosses the boundary. Calls block the calling thread on one
//! process-wide Tokio runtime.
//!
//! The C header `include/lance_c.h` is generated from this crate by cbindgen
//! (see cbindgen.toml); a test regenerates it and fails if it differs.

#![allow(clippy::missing_safety_doc)]

mod commit;
mod dataset;
mod error;
mod ffi;
mod logging;
mod maintain;
mod objects;
mod read;
mod runtime;
mod shared;
mod write;

/// The crate's version and the Lance version it was built with.
#[no_mangle]
pub extern "C" fn lance_c_version() -> *const std::ffi::c_char {
    c"lance-c 0.1.0 (lance 14.0.2)".as_ptr()
}
