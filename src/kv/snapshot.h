// view.snap: a saved copy of a view, so that reopening a dataset need not
// scan every fragment again.
//
// A snapshot records the view as it stood at one dataset version, together
// with what a reopen must check before trusting it: the identity of every
// fragment the view was built from (the caller saves only a view built from
// exactly the fragments of dataset_version, with nothing else in it), the
// lazy_value_threshold it was built with, and each WAL writer's highest
// committed sequence number. Deciding whether a snapshot still applies is the
// caller's job; this file only writes and reads it.
//
// File layout. Integers are little-endian and fixed-width (u8, u32, u64);
// a string is a u32 byte count followed by the bytes.
//
//   magic              8 bytes, "KV0SNAP1"
//   format version     u32, currently 3 (1 is refused, 2 was never used)
//   dataset_version    u64
//   lazy threshold     u64
//   fragment count     u32, then per fragment:
//                        id u64 | data_file string | physical_rows u64 |
//                        deletion_file string | deleted_rows u64
//   mark count         u32, then per mark: writer id string | seq u64
//   range piece count  u64, then per piece, in ascending key order:
//                        begin size u32 | end size u32 | seq u64 |
//                        begin bytes | end bytes
//   entry count        u64, then per entry, in strictly ascending key order:
//                        seq u64 | kind u8 | key size u32 | value size u32 |
//                        key bytes | payload
//                      kind 0 (value):     payload is the value bytes
//                      kind 1 (lazy):      payload is the 16-byte reference
//                                          (version u64, address u64); the
//                                          value size is the real value's
//                      kind 2 (tombstone): no payload, value size 0
//   checksum           u64, xxh3-64 of every byte before it
//
// The sizes sit in front of the key so that a reader learns how long the
// whole entry is from its first 17 bytes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kv/view.h"
#include "lance/dataset.h"

namespace kv0::kv {

struct SnapshotHeader {
  uint64_t dataset_version = 0;       // the version the view was read at
  uint64_t lazy_value_threshold = 0;  // the threshold the view was built with
  // Every fragment the view covers, with its identity.
  std::vector<lance::FragmentInfo> fragments;
  std::map<std::string, uint64_t> marks;  // WAL writer id -> highest committed seq

  bool operator==(const SnapshotHeader&) const = default;
};

// Saves header and view to path, replacing any file there atomically: the
// bytes go to a fresh temporary file in the same directory, which is fsynced,
// renamed over path, and then the directory is fsynced. The file is streamed
// through a fixed buffer, never built whole in memory.
//
// Throws kv0::Error(kIOError) naming path if any step fails. The temporary
// file is then removed and, unless the rename itself already happened (only
// the directory fsync failed), the snapshot that was at path before is
// untouched. A header string or range bound over 4 GiB, which the format
// cannot hold, is kInvalidArgument, with the same cleanup.
void WriteSnapshot(const std::string& path, const SnapshotHeader& header, const View& view);

// Loads the snapshot at path into view, which must be empty (else
// kInvalidArgument), and returns its header; std::nullopt if there is no file
// at path. The file is streamed through a fixed buffer and its checksum
// checked along the way.
//
// Throws kv0::Error(kCorruption) naming the file and the problem if the
// magic, format version, a count or length, the key order or the checksum is
// wrong, and kv0::Error(kIOError) if the file cannot be read. Entries are
// added to view as they are decoded and the checksum can only be compared at
// the end, so after any throw the view may hold part of the snapshot: the
// caller must discard it and build the view by a full scan instead.
std::optional<SnapshotHeader> ReadSnapshot(const std::string& path, View* view);

}  // namespace kv0::kv
