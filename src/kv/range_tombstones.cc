#include "kv/range_tombstones.h"

#include <algorithm>
#include <iterator>
#include <vector>

namespace kv0::kv {

void RangeTombstones::Add(std::string_view begin, std::string_view end, uint64_t seq) {
  if (begin >= end) return;
  struct Span {
    std::string begin, end;
    uint64_t seq;
  };
  std::vector<Span> spans;  // the new pieces over every piece the range touches
  std::string cursor(begin);

  auto it = pieces_.lower_bound(begin);
  if (it != pieces_.begin()) {
    auto prev = std::prev(it);
    if (std::string_view(prev->second.end) > begin) it = prev;
  }
  while (it != pieces_.end() && std::string_view(it->first) < end) {
    const std::string& p_begin = it->first;
    const Piece& p = it->second;
    if (p_begin < cursor) {
      spans.push_back({p_begin, cursor, p.seq});  // the part left of the new range
    } else if (p_begin > cursor) {
      spans.push_back({cursor, p_begin, seq});  // a gap the new range fills alone
      cursor = p_begin;
    }
    std::string overlap_end(std::min(std::string_view(p.end), end));
    spans.push_back({cursor, overlap_end, std::max(p.seq, seq)});
    if (std::string_view(p.end) > end) spans.push_back({std::string(end), p.end, p.seq});
    cursor = overlap_end;
    it = pieces_.erase(it);
  }
  if (std::string_view(cursor) < end) spans.push_back({cursor, std::string(end), seq});

  // Merge neighbours that touch and agree, so repeated deletes of one range
  // do not fragment it.
  std::vector<Span> merged;
  for (auto& s : spans) {
    if (!merged.empty() && merged.back().end == s.begin && merged.back().seq == s.seq) {
      merged.back().end = std::move(s.end);
    } else {
      merged.push_back(std::move(s));
    }
  }
  for (auto& s : merged) pieces_.emplace(std::move(s.begin), Piece{std::move(s.end), s.seq});
}

uint64_t RangeTombstones::Covering(std::string_view key) const {
  auto it = pieces_.upper_bound(key);
  if (it == pieces_.begin()) return 0;
  --it;
  return key < std::string_view(it->second.end) ? it->second.seq : 0;
}

size_t RangeTombstones::DropOlderThan(uint64_t cutoff) {
  return std::erase_if(pieces_, [cutoff](const auto& kv) { return kv.second.seq < cutoff; });
}

}  // namespace kv0::kv
