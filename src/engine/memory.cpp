#include "engine/memory.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <atomic>
#include <mutex>

namespace trainer::engine::memory {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

// Each block carries its size in a header in front of the data; the header keeps the data's
// alignment (c10 aligns blocks to at most 64 bytes, 2 MiB blocks included).
constexpr size_t kHeader = 64;

void count(int64_t bytes) {
  const int64_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void release(void* data) {
  if (data == nullptr) return;
  void* base = static_cast<char*>(data) - kHeader;
  const auto bytes = static_cast<int64_t>(*static_cast<size_t*>(base));
  g_current.fetch_sub(bytes, std::memory_order_relaxed);
  c10::free_cpu(base);
}

// c10's default CPU allocation with a byte count: the same memory, counted.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::kCPU)};
    void* base = c10::alloc_cpu(n + kHeader);
    *static_cast<size_t*>(base) = n;
    count(static_cast<int64_t>(n));
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

void install_cpu_meter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingCpuAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/1);
  });
}

bool counted_by_cpu_meter(const at::Tensor& tensor) {
  return tensor.defined() && tensor.has_storage() && tensor.storage().data_ptr().get_deleter() == &release;
}

int64_t cpu_current_bytes() { return g_current.load(std::memory_order_relaxed); }
int64_t cpu_peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void reset_cpu_peak() { g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed); }

nlohmann::json held_now(at::Device device, int64_t uncounted) {
  if (!device.is_cuda()) return {{"allocatedBytes", cpu_current_bytes() + uncounted}};
  const auto stats = at::accelerator::getDeviceStats(device.index());
  const auto [free_bytes, total_bytes] = at::accelerator::getMemoryInfo(device.index());
  return {{"allocatedBytes", stats.allocated_bytes[0].current},
          {"reservedBytes", stats.reserved_bytes[0].current},
          {"deviceFreeBytes", static_cast<int64_t>(free_bytes)},
          {"deviceTotalBytes", static_cast<int64_t>(total_bytes)}};
}

StepMeter::StepMeter(at::Device device, StaticParts parts) : device_(device), parts_(parts) {}

int64_t StepMeter::allocated_now() const {
  if (device_.is_cuda()) return at::accelerator::getDeviceStats(device_.index()).allocated_bytes[0].current;
  return cpu_current_bytes() + parts_.uncounted;
}

void StepMeter::begin_step() {
  if (device_.is_cuda()) {
    const auto stats = at::accelerator::getDeviceStats(device_.index());
    process_allocated_peak_ = std::max(process_allocated_peak_, stats.allocated_bytes[0].peak);
    process_reserved_peak_ = std::max(process_reserved_peak_, stats.reserved_bytes[0].peak);
    start_ = stats.allocated_bytes[0].current;
    at::accelerator::resetPeakStats(device_.index());
  } else {
    process_allocated_peak_ = std::max(process_allocated_peak_, cpu_peak_bytes() + parts_.uncounted);
    start_ = allocated_now();
    reset_cpu_peak();
  }
}

protocol::StepMemory StepMeter::end_step(int64_t gradient_bytes) {
  protocol::StepMemory out;
  protocol::MemoryUsage& u = out.usage;
  int64_t step_peak = 0;
  if (device_.is_cuda()) {
    const auto stats = at::accelerator::getDeviceStats(device_.index());
    step_peak = stats.allocated_bytes[0].peak;
    const int64_t reserved_peak = stats.reserved_bytes[0].peak;
    process_reserved_peak_ = std::max(process_reserved_peak_, reserved_peak);
    out.reserved_peak_bytes = process_reserved_peak_;
    const auto [free_bytes, total_bytes] = at::accelerator::getMemoryInfo(device_.index());
    const int64_t in_use = static_cast<int64_t>(total_bytes) - static_cast<int64_t>(free_bytes);
    const int64_t outside = std::max<int64_t>(0, in_use - stats.reserved_bytes[0].current);
    u.allocator_cache = std::max<int64_t>(0, reserved_peak - step_peak);
    u.outside_allocator = outside;
    u.free = std::max<int64_t>(0, static_cast<int64_t>(total_bytes) - reserved_peak - outside);
  } else {
    step_peak = cpu_peak_bytes() + parts_.uncounted;
  }
  process_allocated_peak_ = std::max(process_allocated_peak_, step_peak);
  out.allocated_peak_bytes = process_allocated_peak_;
  u.weights = parts_.weights;
  u.adapter = parts_.adapter;
  u.optimizer_state = parts_.optimizer_state;
  u.gradients = gradient_bytes;
  u.activations = std::max<int64_t>(0, step_peak - start_ - gradient_bytes);
  u.other_tensors = std::max<int64_t>(0, start_ - parts_.weights - parts_.adapter - parts_.optimizer_state);
  return out;
}

}  // namespace trainer::engine::memory
