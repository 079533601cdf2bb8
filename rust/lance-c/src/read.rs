//! Reading rows: filtered scans as streams, and takes by row address.

use std::ffi::c_char;

use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use futures::StreamExt;
use lance::dataset::scanner::DatasetRecordBatchStream;
use lance::dataset::ProjectionRequest;
use lance::io::RecordBatchStream;

use crate::dataset::{handle, LanceDataset};
use crate::error::{guard, Failure, Result, LANCE_NOT_FOUND};
use crate::ffi::{give_batches, give_reader, optional_text, texts, u64s};
use crate::runtime::block_on;

/// What a scan reads.
#[repr(C)]
pub struct LanceScanOptions {
    /// Columns to read, in this order; with `columns_len` 0, every column.
    pub columns: *const *const c_char,
    pub columns_len: usize,
    /// An SQL predicate rows must match, or NULL for every row.
    pub filter: *const c_char,
    /// When `use_fragment_ids` is set, only these fragments are read, in
    /// this order.
    pub fragment_ids: *const u64,
    pub fragment_ids_len: usize,
    pub use_fragment_ids: bool,
    /// Adds the `_rowaddr` column (uint64: fragment id << 32 | row offset).
    pub with_row_address: bool,
    /// Rows per batch; 0 leaves Lance's default.
    pub batch_size: usize,
}

/// Serves a Lance stream to a C reader, blocking on the runtime per batch.
struct BlockingStream {
    schema: SchemaRef,
    stream: Option<DatasetRecordBatchStream>,
}

impl Iterator for BlockingStream {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut stream = self.stream.take()?;
        let (item, stream) = block_on(async move {
            let item = stream.next().await;
            (item, stream)
        });
        if item.is_some() {
            self.stream = Some(stream);
        }
        item.map(|result| result.map_err(|e| ArrowError::ExternalError(Box::new(e))))
    }
}

impl RecordBatchReader for BlockingStream {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Scans the handle's version. Batches are decoded as the caller pulls
/// them, so a scan never holds the dataset in memory.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_scan(
    dataset: *const LanceDataset,
    options: *const LanceScanOptions,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let options = options
            .as_ref()
            .ok_or_else(|| Failure::invalid("scan options must not be NULL"))?;
        let columns = texts(options.columns, options.columns_len, "column name")?;
        let filter = optional_text(options.filter, "filter")?;
        let mut scanner = dataset.scan();
        if !columns.is_empty() {
            scanner.project(&columns)?;
        }
        if let Some(filter) = filter {
            scanner.filter(filter)?;
        }
        if options.use_fragment_ids {
            let ids = u64s(
                options.fragment_ids,
                options.fragment_ids_len,
                "fragment ids",
            )?;
            let fragments = ids
                .iter()
                .map(|&id| {
                    dataset
                        .get_fragment(id as usize)
                        .map(|f| f.metadata().clone())
                        .ok_or_else(|| {
                            Failure::new(LANCE_NOT_FOUND, format!("no fragment {id} in dataset"))
                        })
                })
                .collect::<Result<Vec<_>>>()?;
            scanner.with_fragments(fragments);
        }
        if options.with_row_address {
            scanner.with_row_address();
        }
        if options.batch_size > 0 {
            scanner.batch_size(options.batch_size);
        }
        let stream = block_on(async move { scanner.try_into_stream().await })?;
        let reader = BlockingStream {
            schema: stream.schema(),
            stream: Some(stream),
        };
        give_reader(Box::new(reader), out_stream)
    })
}

/// Reads the rows at `addresses` (at the handle's version) in the order
/// given, as a stream of one batch. Deleted rows are left out.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_take(
    dataset: *const LanceDataset,
    addresses: *const u64,
    addresses_len: usize,
    columns: *const *const c_char,
    columns_len: usize,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let addresses = u64s(addresses, addresses_len, "row addresses")?;
        let columns = texts(columns, columns_len, "column name")?;
        // `_rowaddr` may be asked for: it names each row that came back,
        // since a deleted row is left out rather than failing the take.
        let projection = if columns.is_empty() {
            dataset.schema().clone()
        } else {
            dataset.schema().project_preserve_system_columns(&columns)?
        };
        let batch = block_on(async move {
            dataset
                .take_rows(&addresses, ProjectionRequest::from_schema(projection))
                .await
        })?;
        give_batches(batch.schema(), vec![batch], out_stream)
    })
}
