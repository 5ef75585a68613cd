//! Captures this thread's `tracing` output as text, for tests that read log lines.

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use tracing::subscriber::DefaultGuard;

/// Everything logged on this thread at `level` or above while it lives.
pub struct CapturedLog {
    buffer: Buffer,
    _guard: DefaultGuard,
}

impl CapturedLog {
    /// Installs a plain-text subscriber for this thread.
    pub fn start(level: tracing::Level) -> Self {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(level)
            .with_ansi(false)
            .finish();
        CapturedLog {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The text logged so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.buffer.0.lock().unwrap().clone()).unwrap()
    }
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
