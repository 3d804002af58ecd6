//! The parquet writer: one row group per chunk of rows, snappy-compressed.

use super::columns::Row;
use anyhow::Context;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::fs::File;

/// Writes record batches of one layout to a parquet file.
pub struct ParquetSink {
    writer: ArrowWriter<File>,
}

impl ParquetSink {
    /// A writer of `R`'s schema into `file`.
    pub fn new<R: Row>(file: File) -> anyhow::Result<ParquetSink> {
        // Snappy costs little and shrinks the text columns; PNG bytes are already
        // compressed and pass through nearly unchanged.
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let writer =
            ArrowWriter::try_new(file, R::schema(), Some(props)).context("starting the parquet file")?;
        Ok(ParquetSink { writer })
    }

    /// Write `rows` as one row group (flushed at once, so memory holds one chunk).
    pub fn write<R: Row>(&mut self, rows: &[R]) -> anyhow::Result<()> {
        let batch = R::to_batch(rows)?;
        self.writer.write(&batch).context("writing parquet rows")?;
        self.writer.flush().context("writing a parquet row group")?;
        Ok(())
    }

    /// Write the footer and sync the file.
    pub fn finish(self) -> anyhow::Result<()> {
        let file = self.writer.into_inner().context("finishing the parquet file")?;
        file.sync_all().context("syncing the parquet file")?;
        Ok(())
    }
}
