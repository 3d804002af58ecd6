//! The JSON-lines writer: one row a line, images as base64 strings.

use super::columns::Row;
use anyhow::Context;
use std::fs::File;
use std::io::{BufWriter, Write};

/// Writes rows as JSON lines.
pub struct JsonlSink {
    out: BufWriter<File>,
}

impl JsonlSink {
    /// A writer into `file`.
    pub fn new(file: File) -> JsonlSink {
        JsonlSink { out: BufWriter::with_capacity(1 << 20, file) }
    }

    /// Append `rows`, one line each.
    pub fn write<R: Row>(&mut self, rows: &[R]) -> anyhow::Result<()> {
        for r in rows {
            serde_json::to_writer(&mut self.out, r).context("writing a JSON line")?;
            self.out.write_all(b"\n").context("writing a JSON line")?;
        }
        Ok(())
    }

    /// Flush and sync the file.
    pub fn finish(self) -> anyhow::Result<()> {
        let file = self.out.into_inner().map_err(|e| e.into_error()).context("flushing the JSON lines")?;
        file.sync_all().context("syncing the JSON lines")?;
        Ok(())
    }
}
