//! The process-wide Tokio runtime. Every C call blocks its calling thread on
//! it, so the host never sees a future.

use std::future::Future;
use std::sync::OnceLock;

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

fn runtime() -> &'static tokio::runtime::Runtime {
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("lance-c")
            .build()
            .expect("cannot start the Tokio runtime")
    })
}

/// Runs `future` to completion on the shared runtime. The future is spawned
/// onto the runtime's workers, so the caller's thread only waits.
pub fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = runtime().spawn(future);
    match runtime().block_on(handle) {
        Ok(output) => output,
        Err(join_error) if join_error.is_panic() => {
            std::panic::resume_unwind(join_error.into_panic())
        }
        Err(join_error) => panic!("Lance task was cancelled: {join_error}"),
    }
}
