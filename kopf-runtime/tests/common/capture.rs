//! A gate for blocking bodies, and a capture of `tracing` output.

use super::*;

#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    pub fn wait(&self) {
        let (open, cond) = &*self.0;
        let guard = open.lock().unwrap();
        drop(cond.wait_while(guard, |open| !*open).unwrap());
    }

    pub fn open(&self) {
        let (open, cond) = &*self.0;
        *open.lock().unwrap() = true;
        cond.notify_all();
    }
}

/// Captures `tracing` output of the current thread (the paused test runtime's thread).
///
/// Tests run in parallel threads, and tracing caches per call site whether anyone listens; so
/// one global subscriber (installed once) listens to everything and writes each event into the
/// buffer of the thread it happened on, if that thread captures.
pub struct Logs {
    buf: Arc<Mutex<Vec<u8>>>,
}

thread_local! {
    static CAPTURE: RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { RefCell::new(None) };
}

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(buf) = &*c.borrow() {
                buf.lock().unwrap().extend_from_slice(data);
            }
        });
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub fn capture() -> Self {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| LogWriter)
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
                .finish();
            tracing::subscriber::set_global_default(subscriber).unwrap();
        });
        let buf: Arc<Mutex<Vec<u8>>> = Arc::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(Arc::clone(&buf)));
        Self { buf }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }

    /// Lines containing every one of `needles`.
    pub fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
            .collect()
    }
}
