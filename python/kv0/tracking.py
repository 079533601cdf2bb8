"""kv0.tracking: the storage of an experiment tracker.

A repository is a location (a local directory or an object-store URI) holding
four Lance datasets, readable by any Lance reader:

- ``runs.lance``: one row per change of a run's record
- ``params.lance``: one row per (run, dotted parameter key) change
- ``series.lance``: one row per metric series (run, name, context)
- ``metrics.lance``: the points, plus statistics rows

Writing::

    with kv0.tracking.Repo("runs/") as repo:
        with repo.create_run(name="baseline", experiment="mnist") as run:
            run.set_params({"optimizer": {"name": "adam", "lr": 1e-3}})
            for step in range(1000):
                run.track(loss, "loss", step=step, context={"subset": "train"})

``Run.track`` and ``Run.set_params`` only append to a buffer of the Repo
handle and to a local write-ahead log; the buffer is committed every
``flush_rows`` points, every ``flush_interval`` seconds, on ``flush()``,
``Run.finish()`` and ``close()``. A process that dies before a commit loses little: the next
open replays its write-ahead log, which every call reaches before it returns
(the log is a memory-mapped file, so a crash of the process loses nothing
that was acknowledged).

Reading: every query flushes the handle's buffer first and reads the latest
version of the tables, so a handle reads its own writes and everything other
writers committed. Records come back as dicts with the keys of the JSON form
of the C++ types (include/kv0/tracking.h); times are ints of microseconds
since the Unix epoch (UTC), ``*_us`` keys.

Records tables hold what is neither a parameter nor a metric (evaluation
results, trace spans, ...): each is a Lance dataset of its own under
``records/``, created by its first append, whose rows are keyed by
``(run_id, item_id)`` with a JSON ``data`` value; the newest row of a key
replaces the older ones::

    repo.append_records("evals", [{"item_id": "q1", "data": {"score": 0.9},
                                   "run_id": run.run_id}])
    repo.records("evals", run_id=run.run_id, item_prefix="q")

Deleting: ``delete_runs`` hides runs from every read at once and deletes
their rows; ``purge`` then removes the older table versions that still hold
them (a records tag that keeps such rows refuses it, unless ``force``).

Times given to kv0 (``created_at``, ``ended_at``, ``timestamp``,
``start_time``, ``stop_time``, and the ``created_at_us`` and ``ended_at_us``
fields of an update) are a ``datetime`` (a naive one is taken as UTC) or an
int of microseconds since the Unix epoch.

Repo and Run are thread-safe, and many processes may write to one
repository at once. Failures raise the exceptions of kv0.errors (NotFound,
InvalidArgument, NotSupported once the Repo is closed, ...); values of the
wrong Python type raise TypeError.
"""

from __future__ import annotations

import atexit
import os
import weakref
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Union

from kv0._kv0 import tracking as _native

Run = _native.Run
series_id = _native.series_id

__all__ = ["Repo", "Run", "RunPage", "series_id"]


class RunPage(NamedTuple):
    """One page of Repo.search_runs: the runs (a pyarrow.Table), how many
    runs the filter matches over all pages, and the token of the next page
    (None after the last)."""

    runs: Any
    matched: int
    next_page_token: Optional[str]

_open_repos: "weakref.WeakSet[Repo]" = weakref.WeakSet()


@atexit.register
def _close_open_repos() -> None:
    # A script that never closes its Repo keeps its writes.
    for repo in list(_open_repos):
        try:
            repo.close()
        except Exception:  # the WAL keeps them; the next open replays
            pass


class Repo(_native._Repo):
    """A handle on a tracking repository, opened (and created if missing).

    Repo(uri, *, storage_options=None, flush_rows=50000, flush_interval=5.0,
         max_fragments=32, optimize_memory=256 << 20,
         version_retention=7 * 86400, wal_dir=None, wal_sync="batch",
         mark_ttl=30 * 86400, replay_stale_wal=False, request_timeout=30.0,
         request_retries=3, commit_timeout=60.0, finish_waits=True,
         shared_commits=False)

    uri: a directory (str or path) or an object-store URI (s3://, gs://,
    az://, memory://). storage_options: object-store settings handed to
    Lance (aws_endpoint, aws_region, ...). flush_rows: buffered points that
    trigger a commit (a writer that gets twice as far ahead of the
    background commit waits for it). flush_interval: seconds between
    commits of a non-empty buffer. max_fragments: a table with more
    fragments under 2**20 rows after a commit is compacted. optimize_memory: bytes the
    sorted rewrite of optimize() may hold. version_retention: seconds
    old table versions are kept before a background cleanup removes them. wal_dir: root of the local write-ahead
    logs (default $KV0_WAL_DIR, else ~/.cache/kv0/wal). wal_sync: "none"
    (never fsynced: survives the process dying, not a power loss), "batch"
    (also fsynced about every 100 ms) or "always" (fsynced before every
    write returns).
    mark_ttl: seconds WAL marks are kept. replay_stale_wal: replay a WAL
    older than mark_ttl instead of refusing to open. request_timeout:
    seconds an object-store request may take, retried request_retries
    times (the storage options "timeout" and "client_max_retries" override
    both). commit_timeout: seconds a commit may take, retries of races lost
    to other writers included (0: no bound); a flush whose commit takes
    longer raises StoreIOError and keeps its writes buffered and logged.
    finish_waits: Run.finish() returns once its flush has committed the
    run's writes (other handles read them); False: once the final status
    is in the write-ahead log, as track() does, the commit left to a
    background flush it starts, which a process logging short runs one
    after another then shares between several runs' writes (flush() or
    close() wait for it). shared_commits: this handle's flushes
    announce their rows and any writer's commit takes every announced
    fragment, so that many processes writing one repository share commits
    instead of queueing on each table's manifest; handles with and without
    it can write one repository together.

    Writing: create_run, resume_run, update_run, flush, close.
    Reading: runs, run, params, all_params, series, all_series,
    series_stats, read_many, read_many_in, read_downsampled,
    search_runs, latest_versions, versions.
    Records tables: append_records, records, records_arrow,
    records_version, record_tables, create_records_tag,
    delete_records_tag, records_tags, has_legacy_records.
    Deleting: delete_runs, purge.
    Maintenance: optimize, recompute_series_stats.

    A Repo is a context manager that closes it on exit; a Repo dropped or
    left open at interpreter exit is closed too. Runs created through it
    keep it alive.

    A Repo and its Runs belong to the process that opened the Repo: in a
    forked child every call on them raises NotSupported, and dropping them
    (or the child's exit) does nothing; the child opens a Repo of its own.
    """

    def __init__(
        self,
        uri: Union[str, os.PathLike],
        *,
        storage_options: Optional[Mapping[str, str]] = None,
        flush_rows: int = 50000,
        flush_interval: float = 5.0,
        max_fragments: int = 32,
        optimize_memory: int = 256 << 20,
        version_retention: float = 7 * 86400,
        wal_dir: Optional[Union[str, os.PathLike]] = None,
        wal_sync: str = "batch",
        mark_ttl: float = 30 * 86400,
        replay_stale_wal: bool = False,
        request_timeout: float = 30.0,
        request_retries: int = 3,
        commit_timeout: float = 60.0,
        finish_waits: bool = True,
        shared_commits: bool = False,
    ) -> None:
        super().__init__(
            os.fspath(uri),
            storage_options=None if storage_options is None else dict(storage_options),
            flush_rows=flush_rows,
            flush_interval=float(flush_interval),
            max_fragments=max_fragments,
            optimize_memory=optimize_memory,
            version_retention=float(version_retention),
            wal_dir=None if wal_dir is None else os.fspath(wal_dir),
            wal_sync=wal_sync,
            mark_ttl=float(mark_ttl),
            replay_stale_wal=replay_stale_wal,
            request_timeout=float(request_timeout),
            request_retries=request_retries,
            commit_timeout=float(commit_timeout),
            finish_waits=finish_waits,
            shared_commits=shared_commits,
        )
        self._opened = True
        _open_repos.add(self)

    def read_downsampled(
        self,
        series_ids: Any,
        buckets: int = 1000,
        start: Any = None,
        stop: Any = None,
        x: str = "step",
    ) -> Any:
        """Each series in buckets for a chart, as a pyarrow.Table with a row
        per series and bucket (needs pyarrow).

        The window is start <= x < stop, x being "step" or "time" (then
        start and stop are datetimes, naive = UTC, or ints of microseconds);
        an end left None is the extreme point of all the series read. Bucket
        edges (columns start, stop) lie on cells of one power-of-two width
        (column width) counted from 0 and clipped to the window, so up to
        buckets + 1 rows per series; buckets with no point are absent. Per
        bucket: count, non_finite, first_step/first and last_step/last (the
        points of smallest and greatest x), min/min_step and max/max_step
        (finite values only: NaN and infinities are counted, never a min or
        max; null when a bucket has no finite value), first_timestamp and
        last_timestamp. A series with at most 2 x buckets points in the
        window comes as its points, one row each, with raw true.

        Raises kv0.errors.InvalidArgument, reading nothing, for buckets < 1,
        start > stop, an x other than "step" or "time", or an id no series
        has.

            table = repo.read_downsampled([series_id], buckets=800)
            lows, highs = table["min"], table["max"]
        """
        import pyarrow

        return pyarrow.table(self._read_downsampled(series_ids, buckets, start, stop, x))

    def search_runs(
        self,
        filter: str = "",
        order_by: Union[str, Sequence[str], None] = None,
        limit: int = 100,
        page_token: Optional[str] = None,
        columns: Optional[Sequence[str]] = None,
    ) -> RunPage:
        """The runs a filter selects, sorted and a page at a time, chosen in
        storage (needs pyarrow). Returns RunPage(runs, matched,
        next_page_token); pass the token back, with the same filter and
        order, for the next page.

        filter: comparisons of params.<key>, metrics.<name>[.<stat>] (stat:
        last, the default, min, max, count, first_step, last_step, min_step,
        max_step, non_finite), metrics['<name>', {<context>}][.<stat>] and
        the attributes run_id, name, experiment, description, status, kind,
        archived, created_at, updated_at, ended_at (times in microseconds),
        with = != < <= > >= LIKE ILIKE [NOT] IN (...) IS [NOT] NULL, joined
        by AND, OR, NOT and parentheses; backquotes quote a name. A missing
        value, or one of another type than the literal, makes a comparison
        false. order_by: terms, each with ASC or DESC (default: newest
        created_at first); missing values sort last; run_id breaks ties.
        columns: params and metrics terms to return (default: every
        parameter and the last value of every series of the page's runs).
        docs/tracking.md has the whole language.

        The table has the run columns (run_id, name, experiment,
        description, status, kind, archived, tags, created_at, updated_at,
        ended_at, target), then params.<key> (text: strings as they are,
        other values as JSON) and metrics.<name>.<stat> (float64 values,
        int64 steps and counts).

        Raises kv0.errors.InvalidArgument, reading nothing, for a malformed
        filter or order (naming the position and what was expected there),
        an unknown attribute, limit < 1 or a token of another query.

            page = repo.search_runs("params.lr < 0.01 AND metrics.loss.min < 0.3",
                                    order_by=["metrics.acc DESC"], limit=50)
            page.runs.to_pandas()
        """
        import pyarrow

        if isinstance(order_by, str):
            order_by = [order_by]
        stream, matched, token = self._search_runs(
            filter,
            list(order_by or []),
            limit,
            page_token,
            None if columns is None else list(columns),
        )
        return RunPage(pyarrow.table(stream), matched, token)

    def close(self) -> None:
        """Commits everything buffered and closes the handle; later calls
        raise kv0.errors.NotSupported. Closing twice is allowed."""
        super().close()
        _open_repos.discard(self)

    def __enter__(self) -> "Repo":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # A handle dropped without close() still commits its writes.
        if not self.__dict__.get("_opened"):
            return  # the open failed: nothing to close
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        if not self.__dict__.get("_opened"):
            return "<kv0.tracking.Repo (not open)>"
        state = " closed" if self.closed else ""
        return f"<kv0.tracking.Repo {self.uri!r}{state}>"
