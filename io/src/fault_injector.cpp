#include "qload/io/fault_injector.hpp"

#include <algorithm>
#include <cerrno>

namespace qload::io {

void FaultInjector::add(FaultRule rule) {
  std::lock_guard lock(mutex_);
  rules_.push_back(rule);
}

int FaultInjector::apply(std::uint32_t file, std::uint64_t offset, std::span<std::byte> dest, int result) {
  std::lock_guard lock(mutex_);
  const std::uint64_t op = ops_seen_++;
  for (FaultRule& rule : rules_) {
    if (rule.times == 0) continue;
    if (rule.file && *rule.file != file) continue;
    if (rule.offset) {
      if (*rule.offset < offset || *rule.offset >= offset + dest.size()) continue;
    } else if (rule.nth_op != op) {
      continue;
    }
    if (rule.times != FaultRule::kAlways) --rule.times;
    ++fired_;
    switch (rule.kind) {
      case FaultKind::kShortRead:
        if (rule.short_bytes) return std::min(result, static_cast<int>(*rule.short_bytes));
        return result >= 2 ? result / 2 : result;
      case FaultKind::kEintr: return -EINTR;
      case FaultKind::kEagain: return -EAGAIN;
      case FaultKind::kEio: return -EIO;
      case FaultKind::kEnomem: return -ENOMEM;
      case FaultKind::kFlipByte: {
        const std::uint64_t at = rule.offset ? *rule.offset - offset : 0;
        if (result > 0 && at < static_cast<std::uint64_t>(result)) dest[at] = ~dest[at];
        return result;
      }
    }
  }
  return result;
}

std::uint64_t FaultInjector::ops_seen() const {
  std::lock_guard lock(mutex_);
  return ops_seen_;
}

std::uint64_t FaultInjector::fired() const {
  std::lock_guard lock(mutex_);
  return fired_;
}

}  // namespace qload::io
