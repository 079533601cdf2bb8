#include "util/location.h"

#include <filesystem>

#include "kv0/error.h"

namespace kv0 {

std::string NormalizeLocation(const std::string& location) {
  if (location.empty()) throw Error(Code::kInvalidArgument, "empty location");
  if (location.find("://") != std::string::npos) return location;
  return std::filesystem::absolute(location).lexically_normal().string();
}

bool IsMemoryUri(const std::string& uri) { return uri.rfind("memory://", 0) == 0; }

}  // namespace kv0
