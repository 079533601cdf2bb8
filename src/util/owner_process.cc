#include "util/owner_process.h"

#include <pthread.h>

#include <mutex>
#include <string>
#include <vector>

#include "kv0/error.h"

namespace kv0 {

std::atomic<uint64_t> OwnerProcess::forks{0};

OwnerProcess::OwnerProcess() {
  // Registered before any object can be inherited, so no fork is missed.
  static const bool counting = [] {
    pthread_atfork(nullptr, nullptr, [] { forks.fetch_add(1, std::memory_order_relaxed); });
    return true;
  }();
  (void)counting;
  forks_ = forks.load(std::memory_order_relaxed);
}

void Abandon(std::shared_ptr<void> owner) {
  static std::mutex* const mu = new std::mutex;
  static auto* const abandoned = new std::vector<std::shared_ptr<void>>;
  std::lock_guard<std::mutex> lock(*mu);
  abandoned->push_back(std::move(owner));
}

void OwnerProcess::ThrowInherited(std::string_view kind, std::string_view name) {
  throw Error(Code::kNotSupported, std::string(kind) + " " + std::string(name) +
                                       " was opened before a fork, by the parent of this "
                                       "process: a child process must open a handle of its own");
}

}  // namespace kv0
