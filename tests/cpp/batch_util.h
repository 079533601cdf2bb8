// Batches for tests, made in memory: a builder's rows wrapped in an
// arrow::Batch directly, without a stream or a dataset in between.
#pragma once

#include <memory>

#include "lance/arrow.h"

namespace kv0::arrow {

inline OwnedArray Finish(BatchBuilder& builder) {
  OwnedArray array;
  builder.Finish(array.get());
  return array;
}

inline std::shared_ptr<const OwnedSchema> Export(const Schema& schema) {
  auto owned = std::make_shared<OwnedSchema>();
  ExportSchema(schema, owned->get());
  return owned;
}

inline Batch Import(const Schema& schema, OwnedArray array) {
  return Batch(Export(schema), std::move(array));
}

}  // namespace kv0::arrow
