//! Status codes, the per-thread error message, and the guard that keeps Rust
//! panics and errors from crossing the C boundary.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The call succeeded.
pub const LANCE_OK: i32 = 0;
/// The dataset, version, tag, index or column does not exist.
pub const LANCE_NOT_FOUND: i32 = 1;
/// A concurrent commit changed what this commit replaces; nothing was committed.
pub const LANCE_CONFLICT: i32 = 2;
/// An argument was not acceptable (bad UTF-8, unknown column, bad filter, ...).
pub const LANCE_INVALID_ARGUMENT: i32 = 3;
/// Storage failed (local disk or object store).
pub const LANCE_IO_ERROR: i32 = 4;
/// The operation is not supported for this dataset.
pub const LANCE_NOT_SUPPORTED: i32 = 5;
/// The dataset or tag to be created already exists.
pub const LANCE_ALREADY_EXISTS: i32 = 6;
/// Stored bytes failed a check.
pub const LANCE_CORRUPTION: i32 = 7;
/// A bug: a panic inside the crate or Lance, caught at the boundary.
pub const LANCE_INTERNAL: i32 = 8;
/// A commit took longer than the handle's commit timeout and was abandoned;
/// it may or may not have taken effect.
pub const LANCE_TIMEOUT: i32 = 9;

/// A failure on its way to the C caller.
pub struct Failure {
    pub code: i32,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Failure>;

impl Failure {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Failure::new(LANCE_INVALID_ARGUMENT, message)
    }
}

impl From<lance::Error> for Failure {
    fn from(err: lance::Error) -> Self {
        use lance::Error as E;
        let code = match &err {
            E::DatasetNotFound { .. }
            | E::NotFound { .. }
            | E::RefNotFound { .. }
            | E::VersionNotFound { .. }
            | E::IndexNotFound { .. }
            | E::FieldNotFound { .. } => LANCE_NOT_FOUND,
            E::CommitConflict { .. }
            | E::RetryableCommitConflict { .. }
            | E::IncompatibleTransaction { .. }
            | E::TooMuchWriteContention { .. }
            | E::VersionConflict { .. } => LANCE_CONFLICT,
            E::DatasetAlreadyExists { .. } | E::RefConflict { .. } => LANCE_ALREADY_EXISTS,
            E::InvalidInput { .. }
            | E::SchemaMismatch { .. }
            | E::Schema { .. }
            | E::InvalidRef { .. }
            | E::InvalidTableLocation { .. } => LANCE_INVALID_ARGUMENT,
            E::NotSupported { .. } => LANCE_NOT_SUPPORTED,
            E::CorruptFile { .. } => LANCE_CORRUPTION,
            E::Internal { .. } => LANCE_INTERNAL,
            _ => LANCE_IO_ERROR,
        };
        Failure::new(code, err.to_string())
    }
}

impl From<arrow_schema::ArrowError> for Failure {
    fn from(err: arrow_schema::ArrowError) -> Self {
        Failure::invalid(err.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // Interior NUL bytes would truncate the message; replace them instead.
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|cell| *cell.borrow_mut() = text);
}

/// `result`, with a location or object that does not exist read as nothing
/// there (`T::default()`): for listings and deletes, where absence is an
/// answer, not a failure.
pub fn or_absent<T: Default>(result: std::result::Result<T, impl Into<Failure>>) -> Result<T> {
    match result.map_err(Into::into) {
        Err(failure) if failure.code == LANCE_NOT_FOUND => Ok(T::default()),
        other => other,
    }
}

/// Runs `body`, turning an error or a panic into a status code and the
/// thread's last error message. Every exported function goes through here.
pub fn guard(body: impl FnOnce() -> Result<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => LANCE_OK,
        Ok(Err(failure)) => {
            set_last_error(&failure.message);
            failure.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            set_last_error(&format!("panic inside lance-c: {what}"));
            LANCE_INTERNAL
        }
    }
}

/// The message of the last failed call on this thread. The pointer stays
/// valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn lance_last_error() -> *const c_char {
    LAST_ERROR.with(|cell| cell.borrow().as_ptr())
}
