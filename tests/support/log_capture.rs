//! Captures this thread's `tracing` output as text, for tests that read log lines.

use std::{
    io::Write,
    sync::{Arc, Mutex, Once},
};

use tracing::{
    level_filters::LevelFilter,
    span,
    subscriber::{DefaultGuard, Interest},
    Event, Metadata, Subscriber,
};

/// Everything logged on this thread at `level` or above while it lives.
pub struct CapturedLog {
    buffer: Buffer,
    _guard: DefaultGuard,
}

impl CapturedLog {
    /// Installs a plain-text subscriber for this thread.
    pub fn start(level: tracing::Level) -> Self {
        keep_callsites_undecided();
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(level)
            .with_ansi(false)
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // A callsite another thread registered while this one was being installed may
        // have cached the other thread's answer; ask every callsite again.
        tracing::callsite::rebuild_interest_cache();
        CapturedLog {
            buffer,
            _guard: guard,
        }
    }

    /// The text logged so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.buffer.0.lock().unwrap().clone()).unwrap()
    }
}

/// Installs [`Undecided`] as the process's global subscriber, once.
///
/// `tracing` caches each callsite's interest for the whole process the first time the
/// callsite is hit, asking the subscribers it knows. With only a thread's own subscriber
/// registered, a callsite first hit by another test thread asks that thread's default
/// (none), caches "never", and this thread's capture then misses the event. A second,
/// global subscriber that answers "sometimes" keeps every callsite asking per event.
fn keep_callsites_undecided() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        tracing::subscriber::set_global_default(Undecided)
            .expect("a test binary that captures logs sets no global subscriber of its own");
    });
}

/// Records nothing, and answers "sometimes" for every callsite.
struct Undecided;

impl Subscriber for Undecided {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::OFF)
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

/// A writer that keeps everything written.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
