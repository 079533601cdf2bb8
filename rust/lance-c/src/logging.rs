//! Forwards log records to a callback the C host installs: Lance's own
//! (emitted through `tracing`) and its dependencies' (through `log`).

use std::ffi::{c_char, c_void, CString};
use std::fmt::Write as _;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};
use std::sync::{Mutex, Once};

use tracing::field::{Field, Visit};
use tracing::span;

/// Receives one log record. `level` is 1 (error) to 5 (trace); the strings
/// are valid only during the call. It may be called from any thread. NULL
/// where a callback is optional.
pub type LanceLogCallback = Option<
    extern "C" fn(level: i32, target: *const c_char, message: *const c_char, user: *mut c_void),
>;

type Callback =
    extern "C" fn(level: i32, target: *const c_char, message: *const c_char, user: *mut c_void);

struct Sink {
    callback: Callback,
    user: usize,
}

/// The installed sink, or null. No lock on the emitting path, so a child
/// forked while another thread was emitting can still log and install.
static SINK: AtomicPtr<Sink> = AtomicPtr::new(ptr::null_mut());
/// Every sink ever installed, never freed: a record being emitted may still
/// use the one replaced, and installs are rare.
static ALL_SINKS: Mutex<Vec<Box<Sink>>> = Mutex::new(Vec::new());
/// The most verbose level forwarded (1 error .. 5 trace); 0 forwards nothing.
static MAX_LEVEL: AtomicI32 = AtomicI32::new(0);

fn wanted(level: i32) -> bool {
    level <= MAX_LEVEL.load(Ordering::Relaxed)
}

fn emit(level: i32, target: &str, message: &str) {
    let Some(sink) = (unsafe { SINK.load(Ordering::Acquire).as_ref() }) else {
        return;
    };
    let clean = |s: &str| CString::new(s.replace('\0', " ")).unwrap_or_default();
    let (target, message) = (clean(target), clean(message));
    (sink.callback)(
        level,
        target.as_ptr(),
        message.as_ptr(),
        sink.user as *mut c_void,
    );
}

struct LogForwarder;

impl log::Log for LogForwarder {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        wanted(metadata.level() as i32)
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            emit(
                record.level() as i32,
                record.target(),
                &record.args().to_string(),
            );
        }
    }

    fn flush(&self) {}
}

static LOG_FORWARDER: LogForwarder = LogForwarder;

fn tracing_level(level: &tracing::Level) -> i32 {
    match *level {
        tracing::Level::ERROR => 1,
        tracing::Level::WARN => 2,
        tracing::Level::INFO => 3,
        tracing::Level::DEBUG => 4,
        tracing::Level::TRACE => 5,
    }
}

/// Collects an event's fields as "message key=value ...".
#[derive(Default)]
struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, "{}={value:?}", field.name());
        }
    }
}

/// A subscriber that keeps no spans and forwards events.
struct TracingForwarder;

impl tracing::Subscriber for TracingForwarder {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event() && wanted(tracing_level(metadata.level()))
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = Text::default();
        event.record(&mut text);
        let metadata = event.metadata();
        emit(tracing_level(metadata.level()), metadata.target(), &text.0);
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// Installs `callback` (or removes it, when NULL) for records at
/// `max_level` (1 error .. 5 trace; 0 forwards nothing) and more severe.
#[no_mangle]
pub extern "C" fn lance_set_log_callback(
    callback: LanceLogCallback,
    user: *mut c_void,
    max_level: i32,
) {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Both fail only if the host process installed its own; then that one
        // keeps receiving the records.
        let _ = log::set_logger(&LOG_FORWARDER);
        let _ = tracing::subscriber::set_global_default(TracingForwarder);
    });
    let sink = match callback {
        Some(callback) => {
            let mut sink = Box::new(Sink {
                callback,
                user: user as usize,
            });
            let raw: *mut Sink = &mut *sink;
            ALL_SINKS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(sink);
            raw
        }
        None => ptr::null_mut(),
    };
    SINK.store(sink, Ordering::Release);
    let level = if callback.is_some() {
        max_level.clamp(0, 5)
    } else {
        0
    };
    MAX_LEVEL.store(level, Ordering::Relaxed);
    log::set_max_level(match level {
        0 => log::LevelFilter::Off,
        1 => log::LevelFilter::Error,
        2 => log::LevelFilter::Warn,
        3 => log::LevelFilter::Info,
        4 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    });
    // Call sites cache whether they are enabled; make them ask again.
    tracing::callsite::rebuild_interest_cache();
}
