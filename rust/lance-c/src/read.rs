//! Reading rows: filtered scans as streams, takes by row address, and
//! ranges of one fragment's rows.

use std::ffi::c_char;
use std::ops::Range;
use std::sync::Arc;

use arrow::ffi_stream::FFI_ArrowArrayStream;
use arrow::record_batch::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use lance::dataset::fragment::FragReadConfig;
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

/// Lance's name for the row address column.
const ROW_ADDRESS: &str = "_rowaddr";

/// Rows per batch of a range read: large enough that a range of a few
/// hundred thousand rows decodes in a few tasks, which run in parallel.
const RANGE_BATCH_ROWS: u32 = 32 * 1024;

/// Reads the rows of fragment `fragment_id` (at the handle's version) whose
/// physical offsets fall in the ranges `[bounds[2i], bounds[2i + 1])`, ranges
/// ascending and not overlapping, in that order, as a stream. Deleted rows
/// are left out. `columns` may name `_rowaddr`; with `columns_len` 0, every
/// column. Where a take by address handles each row on its own, this
/// decodes each range once, as a scan does.
#[no_mangle]
pub unsafe extern "C" fn lance_dataset_read_ranges(
    dataset: *const LanceDataset,
    fragment_id: u64,
    bounds: *const u64,
    bounds_len: usize,
    columns: *const *const c_char,
    columns_len: usize,
    out_stream: *mut FFI_ArrowArrayStream,
) -> i32 {
    guard(|| {
        let dataset = handle(dataset)?.snapshot();
        let bounds = u64s(bounds, bounds_len, "row ranges")?;
        if bounds.len() % 2 != 0 {
            return Err(Failure::invalid("row ranges need a start and a stop each"));
        }
        let ranges: Arc<[Range<u64>]> = bounds.chunks(2).map(|b| b[0]..b[1]).collect();
        let mut previous_stop = 0;
        for range in ranges.iter() {
            if range.start >= range.end || range.start < previous_stop {
                return Err(Failure::invalid(
                    "row ranges must be non-empty, ascending and not overlap",
                ));
            }
            previous_stop = range.end;
        }
        let columns = texts(columns, columns_len, "column name")?;
        let with_address = columns.iter().any(|c| c == ROW_ADDRESS);
        let data_columns: Vec<&String> = columns.iter().filter(|c| *c != ROW_ADDRESS).collect();
        let projection = if columns.is_empty() {
            dataset.schema().clone()
        } else {
            dataset.schema().project(&data_columns)?
        };
        let fragment = dataset.get_fragment(fragment_id as usize).ok_or_else(|| {
            Failure::new(
                LANCE_NOT_FOUND,
                format!("no fragment {fragment_id} in dataset"),
            )
        })?;
        let config = FragReadConfig::default().with_row_address(with_address);
        let batches = block_on(async move {
            let reader = fragment.open(&projection, config).await?;
            reader
                .read_ranges(ranges, RANGE_BATCH_ROWS)
                .await?
                .buffered(decode_tasks())
                .try_collect::<Vec<_>>()
                .await
        })?;
        let schema = match batches.first() {
            Some(batch) => batch.schema(),
            None => Arc::new(arrow_schema::Schema::empty()),
        };
        give_batches(schema, batches, out_stream)
    })
}

/// Batches of a range read decoded at once: one per core.
fn decode_tasks() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
