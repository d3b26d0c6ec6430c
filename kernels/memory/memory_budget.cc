#include "kernels/memory/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "kernels/forwarding_backend.h"

namespace gpucompute {
namespace {

uint64_t Fraction(uint64_t bytes, double fraction) {
  return static_cast<uint64_t>(static_cast<double>(bytes) * fraction);
}

}  // namespace

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

uint64_t ResidentSetBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0;
  uint64_t resident_pages = 0;
  const long page_size = sysconf(_SC_PAGESIZE);
  if (!(statm >> size_pages >> resident_pages) || page_size <= 0) return 0;
  return resident_pages * static_cast<uint64_t>(page_size);
}

namespace {

// A cgroup file's limit: a number of bytes, or nullopt for "max", "-1", a
// missing file or the v1 "unlimited" (a number past any machine's memory).
std::optional<uint64_t> CgroupLimit(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  uint64_t bytes = 0;
  if (!(file >> text) || !absl::SimpleAtoi(text, &bytes)) return std::nullopt;
  if (bytes >= (uint64_t{1} << 62)) return std::nullopt;
  return bytes;
}

// This process's cgroup path per hierarchy: "" for v2 ("0::/path"), else the
// v1 controller list ("4:memory:/path" -> "memory").
std::map<std::string, std::string> SelfCgroups(const std::string& self_cgroup_file) {
  std::map<std::string, std::string> paths;
  std::ifstream file(self_cgroup_file);
  for (std::string line; std::getline(file, line);) {
    const std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      paths[std::string(controller)] = parts[2];
    }
  }
  return paths;
}

}  // namespace

MemoryLimit ProcessMemoryLimit(const std::string& cgroup_root,
                               const std::string& self_cgroup_file) {
  MemoryLimit limit{PhysicalMemoryBytes(), "physical memory"};
  const std::map<std::string, std::string> self = SelfCgroups(self_cgroup_file);
  // v2 at the root, v1's memory controller in its own directory; the process's
  // own cgroup and every ancestor down to the root (a container sees "/").
  const auto v2 = self.find("");
  const auto v1 = self.find("memory");
  const struct {
    std::string dir;
    std::string path;
    const char* file;
    const char* version;
  } hierarchies[] = {
      {cgroup_root, v2 != self.end() ? v2->second : "/", "memory.max", "cgroup v2"},
      {absl::StrCat(cgroup_root, "/memory"), v1 != self.end() ? v1->second : "/",
       "memory.limit_in_bytes", "cgroup v1"},
  };
  for (const auto& hierarchy : hierarchies) {
    std::string path = hierarchy.path;
    while (true) {
      const std::string file = absl::StrCat(hierarchy.dir, path == "/" ? "" : path, "/",
                                            hierarchy.file);
      if (const std::optional<uint64_t> bytes = CgroupLimit(file);
          bytes.has_value() && *bytes < limit.bytes) {
        limit = {*bytes, absl::StrCat(hierarchy.version, " ", hierarchy.file, " at ", file)};
      }
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return limit;
}

MemoryLimit DefaultHostBudget(const BackendOptions& options) {
  const MemoryLimit limit = ProcessMemoryLimit(options.cgroup_root);
  return {Fraction(limit.bytes, kDefaultHostBudgetFraction),
          absl::StrCat("half of ", limit.bytes, " bytes, the ", limit.source)};
}

bool IsMemoryBudgetRefusal(const absl::Status& status) {
  return ReasonOf(status) == reason::kMemoryBudget;
}

MemoryBudget::Charge::Charge(std::shared_ptr<MemoryBudget> budget, uint64_t bytes)
    : budget_(std::move(budget)), bytes_(bytes) {}

MemoryBudget::Charge::Charge(Charge&& other) noexcept
    : budget_(std::move(other.budget_)), bytes_(std::exchange(other.bytes_, 0)) {}

MemoryBudget::Charge& MemoryBudget::Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::move(other.budget_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

MemoryBudget::Charge::~Charge() { Release(); }

void MemoryBudget::Charge::Release() {
  if (budget_ != nullptr) budget_->Release(std::exchange(bytes_, 0));
  budget_.reset();
}

std::shared_ptr<MemoryBudget> MemoryBudget::Create(std::string memory, std::string flag,
                                                   uint64_t capacity_bytes, absl::Duration wait) {
  return std::shared_ptr<MemoryBudget>(
      new MemoryBudget(std::move(memory), std::move(flag), capacity_bytes, wait));
}

MemoryBudget::MemoryBudget(std::string memory, std::string flag, uint64_t capacity_bytes,
                           absl::Duration wait)
    : memory_(std::move(memory)), flag_(std::move(flag)), capacity_bytes_(capacity_bytes),
      wait_(wait) {}

uint64_t MemoryBudget::CeilingFor(uint64_t bytes) const {
  const bool large = bytes > capacity_bytes_ / kLargeAllocationDivisor;
  return large ? Fraction(capacity_bytes_, kLargeAllocationCeiling) : capacity_bytes_;
}

uint64_t MemoryBudget::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_bytes_;
}

absl::StatusOr<MemoryBudget::Charge> MemoryBudget::Reserve(uint64_t bytes) {
  const uint64_t ceiling = CeilingFor(bytes);
  if (bytes > ceiling) return Refusal(bytes, 0, "(more than one allocation may take)");
  absl::MutexLock lock(&mu_);
  auto fits = [this, bytes, ceiling]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return used_bytes_ <= ceiling - bytes;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&fits), wait_)) {
    return Refusal(bytes, used_bytes_,
                   absl::StrCat("after waiting ", absl::FormatDuration(wait_),
                                " (--memory_budget_wait) for memory to be released"));
  }
  used_bytes_ += bytes;
  return Charge(shared_from_this(), bytes);
}

MemoryBudget::Charge MemoryBudget::ChargeFixed(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_bytes_ += bytes;
  return Charge(shared_from_this(), bytes);
}

void MemoryBudget::Release(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_bytes_ -= bytes;
}

absl::Status MemoryBudget::Refusal(uint64_t bytes, uint64_t used, absl::string_view why) const {
  const uint64_t ceiling = CeilingFor(bytes);
  const uint64_t left = ceiling - std::min(used, ceiling);
  return WithReason(absl::ResourceExhaustedError(absl::StrCat(
      "memory budget of ", memory_, " exhausted: ", bytes, " bytes asked, ", left,
      " bytes left ", why, "; the budget is --", flag_, "=", capacity_bytes_,
      ", of which allocations over ", capacity_bytes_ / kLargeAllocationDivisor,
      " bytes may fill ", Fraction(capacity_bytes_, kLargeAllocationCeiling),
      " (the rest is kept for small requests)")),
      reason::kMemoryBudget,
      {{"memory", memory_}, {"limit_name", flag_}, {"limit", absl::StrCat(capacity_bytes_)},
       {"requested", absl::StrCat(bytes)}, {"available", absl::StrCat(left)}});
}

namespace {

// A budget and the size of the memory it is part of: requests larger than the
// memory itself are left to the backend, which names the memory in its refusal.
struct Budgeted {
  std::shared_ptr<MemoryBudget> budget;
  uint64_t memory_bytes = 0;
};

// Keeps the charge until the array it pays for is gone (members are destroyed
// in reverse order: the array first).
struct ChargedArray {
  MemoryBudget::Charge charge;
  std::shared_ptr<Array> array;
};

// Charges every array to the budget of its memory; the rest passes through.
class BudgetedBackend final : public ForwardingBackend {
 public:
  BudgetedBackend(std::unique_ptr<Backend> inner, const BackendOptions& options)
      : ForwardingBackend(std::move(inner)) {
    host_.memory_bytes = PhysicalMemoryBytes();
    host_.budget = MemoryBudget::Create(
        "host", "host_memory_budget_bytes",
        options.host_memory_budget_bytes > 0 ? options.host_memory_budget_bytes
                                             : DefaultHostBudget(options).bytes,
        options.memory_budget_wait);
    for (const DeviceDescription& device : this->inner().Devices()) {
      int ordinal = 0;
      if (!absl::StartsWith(device.name, "cuda:") ||
          !absl::SimpleAtoi(absl::StripPrefix(device.name, "cuda:"), &ordinal)) {
        continue;  // the CPU backend's one device is the host
      }
      devices_[ordinal] = Budgeted{
          MemoryBudget::Create(device.name, "device_memory_budget_bytes",
                               options.device_memory_budget_bytes > 0
                                   ? options.device_memory_budget_bytes
                                   : Fraction(device.memory_bytes, kDefaultDeviceBudgetFraction),
                               options.memory_budget_wait),
          device.memory_bytes};
    }
    pinned_staging_ = host_.budget->ChargeFixed(this->inner().Stats().pinned_staging_bytes);
  }

  const std::shared_ptr<MemoryBudget>& host_budget() const { return host_.budget; }

  BackendStats Stats() const override {
    BackendStats stats = inner().Stats();
    auto add = [&stats](const MemoryBudget& budget) {
      stats.memory_budgets.push_back(MemoryBudgetStats{budget.memory(), budget.used_bytes(),
                                                       budget.capacity_bytes()});
    };
    add(*host_.budget);
    for (const auto& [ordinal, device] : devices_) add(*device.budget);
    return stats;
  }

  absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape, int device) override {
    const Budgeted* budgeted = Find(device);
    if (budgeted == nullptr) return inner().Allocate(dtype, std::move(shape), device);
    const int64_t max_count = static_cast<int64_t>(
        std::min<uint64_t>(budgeted->memory_bytes, std::numeric_limits<int64_t>::max()) /
        ElementSize(dtype));
    absl::StatusOr<int64_t> count = CheckedElementCount(shape, max_count, "array");
    if (!count.ok()) return inner().Allocate(dtype, std::move(shape), device);
    absl::StatusOr<MemoryBudget::Charge> charge =
        budgeted->budget->Reserve(static_cast<uint64_t>(*count) * ElementSize(dtype));
    if (!charge.ok()) return charge.status();
    absl::StatusOr<std::shared_ptr<Array>> array = inner().Allocate(dtype, std::move(shape), device);
    if (!array.ok()) return array.status();
    Array* raw = array->get();
    auto charged = std::make_shared<ChargedArray>(
        ChargedArray{*std::move(charge), *std::move(array)});
    return std::shared_ptr<Array>(std::move(charged), raw);
  }

  // The inputs are charged to the device's budget while the call runs; the result
  // to the budget of the memory it comes back in, while it lives.
  absl::StatusOr<std::shared_ptr<Array>> RunFromHost(std::span<const HostInput> inputs,
                                                     DType out_dtype, const Shape& out_shape,
                                                     int device, OpContext& ctx,
                                                     ArraysRun run) override {
    const Budgeted* budgeted = Find(device);
    absl::StatusOr<int64_t> count =
        CheckedElementCount(out_shape, std::numeric_limits<int64_t>::max() / 8, "result");
    if (budgeted == nullptr || !count.ok()) {
      return inner().RunFromHost(inputs, out_dtype, out_shape, device, ctx, run);
    }
    const uint64_t out_bytes = static_cast<uint64_t>(*count) * ElementSize(out_dtype);
    uint64_t in_bytes = 0;
    for (const HostInput& input : inputs) {
      for (const HostPiece& piece : input.pieces) in_bytes += piece.bytes;
    }
    GC_ASSIGN_OR_RETURN(MemoryBudget::Charge in, budgeted->budget->Reserve(in_bytes));
    GC_ASSIGN_OR_RETURN(MemoryBudget::Charge out_there, budgeted->budget->Reserve(out_bytes));
    GC_ASSIGN_OR_RETURN(MemoryBudget::Charge out_host, host_.budget->Reserve(out_bytes));
    absl::StatusOr<std::shared_ptr<Array>> array =
        inner().RunFromHost(inputs, out_dtype, out_shape, device, ctx, run);
    if (!array.ok()) return array.status();
    Array* raw = array->get();
    auto charged = std::make_shared<ChargedArray>(ChargedArray{
        raw->device() == kHostDevice ? std::move(out_host) : std::move(out_there),
        *std::move(array)});
    return std::shared_ptr<Array>(std::move(charged), raw);
  }

  // Shared memory is the client's, not the server's: it is counted by the
  // server's shared-memory limits, not by these budgets (PinHostMemory and
  // OpenIpcMemory pass through).

 private:
  // The budget of the memory `device` names; null for a device the backend
  // does not have (the backend refuses it).
  const Budgeted* Find(int device) const {
    if (device == kHostDevice || (device == 0 && devices_.empty())) return &host_;
    auto it = devices_.find(device);
    return it == devices_.end() ? nullptr : &it->second;
  }

  Budgeted host_;
  std::map<int, Budgeted> devices_;  // by CUDA ordinal
  MemoryBudget::Charge pinned_staging_;
};

}  // namespace

std::unique_ptr<Backend> WithMemoryBudgets(std::unique_ptr<Backend> inner,
                                           const BackendOptions& options) {
  return std::make_unique<BudgetedBackend>(std::move(inner), options);
}

std::shared_ptr<MemoryBudget> HostMemoryBudget(const Backend& backend) {
  const auto* budgeted = dynamic_cast<const BudgetedBackend*>(&backend);
  return budgeted == nullptr ? nullptr : budgeted->host_budget();
}

}  // namespace gpucompute
