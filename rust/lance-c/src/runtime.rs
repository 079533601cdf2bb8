//! The process-wide Tokio runtime. Every C call blocks its calling thread on
//! it, so the host never sees a future.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{Failure, LANCE_TIMEOUT};

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
    let mut handle = runtime().spawn(future);
    let waited = runtime().block_on(async { tokio::time::timeout(timeout, &mut handle).await });
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
