// Naming a database or repository location the same way in every handle.
#pragma once

#include <string>

namespace kv0 {

// Paths become absolute and normal, so every handle names a location (and
// its WAL directory) the same way; URIs pass through. Throws
// kInvalidArgument for an empty location.
std::string NormalizeLocation(const std::string& location);

// memory:// locations are private to one handle: no WAL, nothing to replay.
bool IsMemoryUri(const std::string& uri);

}  // namespace kv0
