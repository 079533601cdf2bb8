// The range deletions a view knows, kept as non-overlapping pieces.
//
// Overlapping ranges are split where they meet, and each piece keeps the
// newest sequence number of the ranges covering it. That answers the one
// question reads and applies ask, "what is the newest range deletion
// covering this key?", with one tree lookup, and loses nothing: a piece
// deletes exactly what the original ranges deleted.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace kv0::kv {

class RangeTombstones {
 public:
  struct Piece {
    std::string end;  // exclusive
    uint64_t seq;
  };

  // Records the deletion of [begin, end) at seq. An empty range is ignored.
  void Add(std::string_view begin, std::string_view end, uint64_t seq);
  // The newest seq of a deletion covering key, or 0.
  uint64_t Covering(std::string_view key) const;
  // Removes the pieces older than cutoff; returns how many.
  size_t DropOlderThan(uint64_t cutoff);

  size_t size() const { return pieces_.size(); }
  bool empty() const { return pieces_.empty(); }
  // Pieces in key order: begin -> (end, seq).
  const std::map<std::string, Piece, std::less<>>& pieces() const { return pieces_; }

 private:
  std::map<std::string, Piece, std::less<>> pieces_;
};

}  // namespace kv0::kv
