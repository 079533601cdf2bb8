// Room for more elements before appending a known number of them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kv0 {

// Makes room for `more` elements past v's size. The capacity at least
// doubles when it grows, so that a vector filled in many known-size steps
// (a series read batch by batch) copies its elements a bounded number of
// times, as push_back alone would, while a single step allocates once.
template <typename T>
void ReserveMore(std::vector<T>* v, size_t more) {
  const size_t needed = v->size() + more;
  if (needed > v->capacity()) v->reserve(std::max(needed, 2 * v->capacity()));
}

}  // namespace kv0
