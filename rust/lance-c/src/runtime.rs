//! The process-wide Tokio runtime. Every C call blocks its calling thread on
//! it, so the host never sees a future.
//!
//! A forked child has none of the parent's threads, so the parent's runtime
//! can run nothing there: a call would wait forever. A fork handler forgets
//! it in the child (it is leaked, never dropped: dropping would wait for
//! threads that do not exist), and the child's first call builds its own.
//! Everything else bound to a runtime (object-store clients with their
//! connection pools) lives in `Process` beside it, so it is made anew too.

use std::collections::HashMap;
use std::ffi::c_int;
use std::future::Future;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use lance::io::{ObjectStore, ObjectStoreRegistry};
use object_store::path::Path;

use crate::error::{Failure, LANCE_TIMEOUT};

/// A directory's URI and the storage options it is reached with, sorted.
pub type DirectoryKey = (String, Vec<(String, String)>);

/// What one process owns: the runtime, and the object stores built on it.
pub struct Process {
    runtime: tokio::runtime::Runtime,
    /// Where listings and small objects go: Lance's registry of object
    /// stores, and the stores it built, kept by directory and options
    /// (`objects::directory`).
    pub list_registry: Arc<ObjectStoreRegistry>,
    pub directories: Mutex<HashMap<DirectoryKey, (Arc<ObjectStore>, Path)>>,
    /// The parent's `Process` when this one was built in a fork's child:
    /// kept reachable, so that leak checkers do not report it.
    _inherited: usize,
}

/// The current process's `Process`, or null before the first call (and in a
/// child right after fork).
static CURRENT: AtomicPtr<Process> = AtomicPtr::new(ptr::null_mut());
/// The parent's, in a child that has not built its own yet.
static INHERITED: AtomicPtr<Process> = AtomicPtr::new(ptr::null_mut());
static FORK_HANDLER: Once = Once::new();

extern "C" {
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> c_int;
}

/// Runs in the child, the only thread there: atomic stores only.
extern "C" fn forget_parent_process() {
    INHERITED.store(
        CURRENT.swap(ptr::null_mut(), Ordering::SeqCst),
        Ordering::SeqCst,
    );
}

/// The current process's runtime and stores, built on first use.
pub fn process() -> &'static Process {
    let current = CURRENT.load(Ordering::Acquire);
    if !current.is_null() {
        // Never freed: a `Process` lives as long as the process that built it.
        return unsafe { &*current };
    }
    FORK_HANDLER.call_once(|| unsafe {
        pthread_atfork(None, None, Some(forget_parent_process));
    });
    let built = Box::into_raw(Box::new(Process {
        runtime: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("lance-c")
            .build()
            .expect("cannot start the Tokio runtime"),
        list_registry: Arc::new(ObjectStoreRegistry::default()),
        directories: Mutex::new(HashMap::new()),
        _inherited: INHERITED.load(Ordering::SeqCst) as usize,
    }));
    match CURRENT.compare_exchange(ptr::null_mut(), built, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => unsafe { &*built },
        Err(winner) => {
            // Another thread built one first; this one has run nothing yet.
            drop(unsafe { Box::from_raw(built) });
            unsafe { &*winner }
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    &process().runtime
}

/// Runs `future` to completion on the shared runtime. The future is spawned
/// onto the runtime's workers, so the caller's thread only waits.
pub fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let runtime = runtime();
    let handle = runtime.spawn(future);
    match runtime.block_on(handle) {
        Ok(output) => output,
        Err(join_error) if join_error.is_panic() => {
            std::panic::resume_unwind(join_error.into_panic())
        }
        Err(join_error) => panic!("Lance task was cancelled: {join_error}"),
    }
}

/// As `block_on`, but polls `future` on the caller's thread (what it spawns
/// still runs on the workers). For calls that usually find their answer at
/// once, such as a version check: there the hand-off to a worker and the
/// wake-up back cost more than the call. Long reads keep `block_on`, where
/// the caller's thread would only add a third busy thread to the workers.
pub fn block_on_here<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// As `block_on`, but gives up after `timeout` (None: waits as long as it
/// takes) and aborts the task: work cut short at an await point may or may
/// not have taken effect, which the `LANCE_TIMEOUT` failure says.
pub fn block_on_within<F, T, E>(timeout: Option<Duration>, future: F) -> Result<T, Failure>
where
    F: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Into<Failure> + Send + 'static,
{
    let Some(timeout) = timeout else {
        return block_on(future).map_err(Into::into);
    };
    let runtime = runtime();
    let mut handle = runtime.spawn(future);
    let waited = runtime.block_on(async { tokio::time::timeout(timeout, &mut handle).await });
    match waited {
        Ok(Ok(output)) => output.map_err(Into::into),
        Ok(Err(join_error)) if join_error.is_panic() => {
            std::panic::resume_unwind(join_error.into_panic())
        }
        Ok(Err(join_error)) => panic!("Lance task was cancelled: {join_error}"),
        Err(_) => {
            handle.abort();
            Err(Failure::new(
                LANCE_TIMEOUT,
                format!(
                    "the commit did not finish within {} ms; it may or may not have taken effect",
                    timeout.as_millis()
                ),
            ))
        }
    }
}
