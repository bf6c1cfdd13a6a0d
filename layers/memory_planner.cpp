#include "layers/memory_planner.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "layers/device_allocator.h"

namespace seqbench::layers {

namespace {

bool is_power_of_two(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// offset + bytes, saturating: a corrupt plan must be reported, not wrap around.
std::size_t end_of(std::size_t offset, std::size_t bytes) {
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  return bytes > max - offset ? max : offset + bytes;
}

std::string describe_lifetime(const TensorLifetime& t) {
  std::ostringstream os;
  os << "'" << t.name << "' (" << t.bytes << " bytes, steps " << t.first_step << ".." << t.last_step << ")";
  return os.str();
}

void validate_tensor(const TensorLifetime& t, std::size_t index) {
  SEQBENCH_REQUIRE(is_power_of_two(t.alignment), "tensor " << index << " " << describe_lifetime(t)
                                                           << ": alignment " << t.alignment
                                                           << " is not a power of two");
  SEQBENCH_REQUIRE(t.first_step >= 0, "tensor " << index << " " << describe_lifetime(t) << ": first_step "
                                                << t.first_step << " is negative");
  SEQBENCH_REQUIRE(t.first_step <= t.last_step, "tensor " << index << " " << describe_lifetime(t)
                                                          << ": first_step " << t.first_step
                                                          << " is after last_step " << t.last_step);
  SEQBENCH_REQUIRE(!t.external || t.bytes == 0, "tensor " << index << " " << describe_lifetime(t)
                                                          << " is external (the caller's) but has " << t.bytes
                                                          << " bytes to place");
}

std::size_t slot_bytes(const TensorLifetime& t) {
  return align_up(t.bytes, t.alignment);
}

}  // namespace

std::size_t align_up(std::size_t value, std::size_t alignment) {
  SEQBENCH_REQUIRE(is_power_of_two(alignment), "alignment " << alignment << " is not a power of two");
  SEQBENCH_REQUIRE(value <= std::numeric_limits<std::size_t>::max() - (alignment - 1),
                   "align_up(" << value << ", " << alignment << ") overflows size_t");
  return (value + alignment - 1) & ~(alignment - 1);
}

// ---------------------------------------------------------------------------------------------
// LifetimeRecorder

LifetimeRecorder::LifetimeRecorder(std::size_t alignment) : alignment_(alignment) {
  SEQBENCH_REQUIRE(is_power_of_two(alignment),
                   "LifetimeRecorder: alignment " << alignment << " is not a power of two");
}

TensorId LifetimeRecorder::tensor(std::string name, std::size_t bytes) {
  SEQBENCH_REQUIRE(!name.empty(), "LifetimeRecorder: a tensor needs a name");
  SEQBENCH_REQUIRE(!by_name_.count(name), "LifetimeRecorder: tensor '" << name << "' is declared twice");
  const TensorId id = entries_.size();
  Entry e;
  e.lifetime.name = name;
  e.lifetime.bytes = bytes;
  e.lifetime.alignment = alignment_;
  entries_.push_back(std::move(e));
  by_name_.emplace(std::move(name), id);
  return id;
}

TensorId LifetimeRecorder::external(std::string name) {
  const TensorId id = tensor(std::move(name), 0);
  entries_[id].lifetime.external = true;
  entries_[id].written = true;  // the caller provides it
  return id;
}

const std::string& LifetimeRecorder::name(TensorId id) const {
  SEQBENCH_REQUIRE(id < entries_.size(), "LifetimeRecorder: tensor id " << id << " is not one of the "
                                                                        << entries_.size() << " declared");
  return entries_[id].lifetime.name;
}

void LifetimeRecorder::touch(TensorId id, int step, const std::string& op_name, bool write) {
  SEQBENCH_REQUIRE(id < entries_.size(), "op '" << op_name << "' uses tensor id " << id << ", but only "
                                                << entries_.size() << " tensors are declared");
  Entry& e = entries_[id];
  SEQBENCH_REQUIRE(write || e.written, "op '" << op_name << "' (step " << step << ") reads tensor '"
                                              << e.lifetime.name << "' before any op wrote it");
  if (!e.used) {
    e.lifetime.first_step = step;
    e.used = true;
  }
  e.lifetime.last_step = step;
  e.written = e.written || write;
  if (write) e.last_write = step;
  if (!write) e.last_read = step;
}

int LifetimeRecorder::op(std::string name, const std::vector<TensorId>& reads,
                         const std::vector<TensorId>& writes) {
  const int step = steps();
  for (TensorId id : reads) touch(id, step, name, false);
  for (TensorId id : writes) touch(id, step, name, true);
  ops_.push_back(std::move(name));
  return step;
}

std::vector<TensorLifetime> LifetimeRecorder::lifetimes() const {
  std::vector<TensorLifetime> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) {
    SEQBENCH_REQUIRE(e.used,
                     "LifetimeRecorder: tensor '" << e.lifetime.name << "' is declared but no op uses it");
    out.push_back(e.lifetime);
  }
  return out;
}

std::vector<TensorLifetime> LifetimeRecorder::lifetimes_retaining_forward(int forward_steps) const {
  SEQBENCH_REQUIRE(forward_steps >= 0 && forward_steps <= steps(), "LifetimeRecorder: forward_steps "
                                                                       << forward_steps << " is outside [0, "
                                                                       << steps() << "]");
  std::vector<TensorLifetime> out = lifetimes();
  for (std::size_t i = 0; i < out.size(); ++i) {
    TensorLifetime& t = out[i];
    const Entry& e = entries_[i];
    const bool kept = !t.external && t.first_step < forward_steps && e.last_read >= forward_steps;
    if (!kept) continue;
    const int last_write = e.last_write;
    SEQBENCH_REQUIRE(last_write < forward_steps,
                     "LifetimeRecorder: tensor '"
                         << t.name << "' is written by the forward and again by op '"
                         << ops_[static_cast<std::size_t>(last_write)] << "' (step " << last_write
                         << ", after the forward's " << forward_steps
                         << " steps): a second backward would read the first one's values");
    t.last_step = steps() - 1;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The planner: greedy by size, lowest fitting offset.

namespace {

// Places the tensors in `order`, each at the lowest aligned offset where it overlaps in memory no
// already-placed tensor whose lifetime overlaps its own.
MemoryPlan place_in_order(const std::vector<TensorLifetime>& tensors, const std::vector<std::size_t>& slot,
                          const std::vector<std::size_t>& order) {
  MemoryPlan plan;
  plan.offsets.assign(tensors.size(), 0);
  // Placed tensors, sorted by offset: the scan below moves a candidate offset up past every
  // placed tensor that overlaps it in time and in memory, and stops at the first gap that fits.
  std::vector<std::size_t> placed;
  placed.reserve(tensors.size());
  for (const std::size_t i : order) {
    const TensorLifetime& t = tensors[i];
    if (slot[i] == 0) continue;  // occupies nothing (empty or external): offset 0, never placed
    std::size_t candidate = 0;
    for (const std::size_t p : placed) {
      const TensorLifetime& other = tensors[p];
      if (other.last_step < t.first_step || t.last_step < other.first_step) continue;  // never live together
      if (candidate + slot[i] <= plan.offsets[p]) break;  // fits below p, hence below all later ones
      candidate = std::max(candidate, align_up(plan.offsets[p] + slot[p], t.alignment));
    }
    plan.offsets[i] = candidate;
    SEQBENCH_REQUIRE(candidate <= std::numeric_limits<std::size_t>::max() - slot[i],
                     "plan_memory: the block for tensor " << describe_lifetime(t) << " overflows size_t");
    plan.block_bytes = std::max(plan.block_bytes, candidate + slot[i]);
    const auto at =
        std::upper_bound(placed.begin(), placed.end(), candidate,
                         [&](std::size_t offset, std::size_t q) { return offset < plan.offsets[q]; });
    placed.insert(at, i);
  }
  return plan;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<TensorLifetime>& tensors) {
  const std::size_t n = tensors.size();
  for (std::size_t i = 0; i < n; ++i) validate_tensor(tensors[i], i);

  std::vector<std::size_t> slot(n);
  for (std::size_t i = 0; i < n; ++i) slot[i] = slot_bytes(tensors[i]);

  // Largest slot first in both orders. Among equal slots: the longer lifetime first (then the
  // earlier first use), or the earlier first use first. Each reaches the max-live lower bound on
  // inputs where the other does not (see the header); the smaller block wins, the first on a tie.
  std::vector<std::size_t> by_duration(n);
  std::iota(by_duration.begin(), by_duration.end(), std::size_t{0});
  std::vector<std::size_t> by_first_use = by_duration;
  std::sort(by_duration.begin(), by_duration.end(), [&](std::size_t a, std::size_t b) {
    const TensorLifetime& ta = tensors[a];
    const TensorLifetime& tb = tensors[b];
    if (slot[a] != slot[b]) return slot[a] > slot[b];
    const int da = ta.last_step - ta.first_step;
    const int db = tb.last_step - tb.first_step;
    if (da != db) return da > db;
    if (ta.first_step != tb.first_step) return ta.first_step < tb.first_step;
    return a < b;
  });
  std::sort(by_first_use.begin(), by_first_use.end(), [&](std::size_t a, std::size_t b) {
    if (slot[a] != slot[b]) return slot[a] > slot[b];
    if (tensors[a].first_step != tensors[b].first_step) return tensors[a].first_step < tensors[b].first_step;
    return a < b;
  });
  MemoryPlan plan = place_in_order(tensors, slot, by_duration);
  MemoryPlan other = place_in_order(tensors, slot, by_first_use);
  return other.block_bytes < plan.block_bytes ? other : plan;
}

// ---------------------------------------------------------------------------------------------
// The checking mode. Deliberately written from the definitions, not from the planner's code: it
// looks at every pair, with the raw byte ranges [offset, offset + bytes).

std::vector<std::string> find_plan_violations(const std::vector<TensorLifetime>& tensors,
                                              const MemoryPlan& plan, std::size_t limit) {
  std::vector<std::string> problems;
  std::size_t dropped = 0;
  auto report = [&](const std::string& line) {
    if (problems.size() < limit) {
      problems.push_back(line);
    } else {
      ++dropped;
    }
  };
  if (plan.offsets.size() != tensors.size()) {
    std::ostringstream os;
    os << "the plan has " << plan.offsets.size() << " offsets for " << tensors.size() << " tensors";
    return {os.str()};
  }
  const std::size_t n = tensors.size();
  for (std::size_t i = 0; i < n; ++i) {
    const TensorLifetime& t = tensors[i];
    const std::size_t off = plan.offsets[i];
    if (t.external && t.bytes != 0) {
      std::ostringstream os;
      os << "tensor " << describe_lifetime(t) << " is external but has bytes";
      report(os.str());
    }
    if (t.alignment == 0 || off % t.alignment != 0) {
      std::ostringstream os;
      os << "tensor " << describe_lifetime(t) << " is at offset " << off
         << ", not a multiple of its alignment " << t.alignment;
      report(os.str());
    }
    if (t.bytes > 0 && (off > plan.block_bytes || t.bytes > plan.block_bytes - off)) {
      std::ostringstream os;
      os << "tensor " << describe_lifetime(t) << " at offset " << off << " ends past the block of "
         << plan.block_bytes << " bytes";
      report(os.str());
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const TensorLifetime& a = tensors[i];
    if (a.bytes == 0) continue;
    const std::size_t a_begin = plan.offsets[i];
    const std::size_t a_end = end_of(a_begin, a.bytes);
    for (std::size_t j = i + 1; j < n; ++j) {
      const TensorLifetime& b = tensors[j];
      if (b.bytes == 0) continue;
      const bool live_together = a.first_step <= b.last_step && b.first_step <= a.last_step;
      if (!live_together) continue;
      const std::size_t b_begin = plan.offsets[j];
      const std::size_t b_end = end_of(b_begin, b.bytes);
      if (a_begin < b_end && b_begin < a_end) {
        std::ostringstream os;
        os << "tensors " << describe_lifetime(a) << " at [" << a_begin << ", " << a_end << ") and "
           << describe_lifetime(b) << " at [" << b_begin << ", " << b_end
           << ") are live at the same step and overlap in memory";
        report(os.str());
      }
    }
  }
  if (dropped > 0) problems.push_back("... and " + std::to_string(dropped) + " more");
  return problems;
}

void check_plan(const std::vector<TensorLifetime>& tensors, const MemoryPlan& plan) {
  const std::vector<std::string> problems = find_plan_violations(tensors, plan);
  if (problems.empty()) return;
  std::string text;
  for (const std::string& p : problems) text += (text.empty() ? "" : "; ") + p;
  SEQBENCH_FAIL("memory plan check failed: " << text);
}

std::size_t naive_bytes(const std::vector<TensorLifetime>& tensors) {
  std::size_t sum = 0;
  for (const TensorLifetime& t : tensors) sum += slot_bytes(t);
  return sum;
}

std::size_t max_live_bytes(const std::vector<TensorLifetime>& tensors, bool padded) {
  // A sweep over (step, +size) at first_step and (step, -size) after last_step: all changes at one
  // step are applied before the total is read, so a tensor ending at s and one starting at s + 1
  // never count together.
  std::vector<std::pair<long long, long long>> events;
  events.reserve(2 * tensors.size());
  for (const TensorLifetime& t : tensors) {
    const std::size_t size = padded ? slot_bytes(t) : t.bytes;
    if (size == 0) continue;
    events.emplace_back(t.first_step, static_cast<long long>(size));
    events.emplace_back(static_cast<long long>(t.last_step) + 1, -static_cast<long long>(size));
  }
  std::sort(events.begin(), events.end());
  long long live = 0;
  long long peak = 0;
  for (std::size_t i = 0; i < events.size();) {
    const long long step = events[i].first;
    for (; i < events.size() && events[i].first == step; ++i) live += events[i].second;
    peak = std::max(peak, live);
  }
  return static_cast<std::size_t>(peak);
}

// ---------------------------------------------------------------------------------------------
// MemoryManager

MemoryManager::MemoryManager(std::vector<TensorLifetime> tensors, DeviceAllocator& allocator)
    : tensors_(std::move(tensors)), plan_(plan_memory(tensors_)), allocator_(allocator) {
  check_plan(tensors_, plan_);
  std::size_t max_alignment = 1;
  for (const TensorLifetime& t : tensors_) max_alignment = std::max(max_alignment, t.alignment);
  block_ = allocator_.allocate(plan_.block_bytes);
  const auto address = reinterpret_cast<std::uintptr_t>(block_);
  if (address % max_alignment != 0) {
    allocator_.deallocate(block_);
    block_ = nullptr;
    SEQBENCH_FAIL("MemoryManager: the allocator returned a block at "
                  << address << ", not aligned to " << max_alignment << " bytes as the plan's tensors need");
  }
}

MemoryManager::~MemoryManager() {
  allocator_.deallocate(block_);
}

void* MemoryManager::get(TensorId id, std::size_t bytes) const {
  SEQBENCH_REQUIRE(id < tensors_.size(), "MemoryManager: tensor id " << id << " is not one of the "
                                                                     << tensors_.size() << " planned");
  const TensorLifetime& t = tensors_[id];
  SEQBENCH_REQUIRE(!t.external,
                   "MemoryManager: tensor '" << t.name << "' is external: the caller owns its memory");
  SEQBENCH_REQUIRE(bytes <= t.bytes, "MemoryManager: tensor '" << t.name << "' requested " << bytes
                                                               << " bytes, more than its planned maximum of "
                                                               << t.bytes
                                                               << " bytes (the plan is sized for the maximum "
                                                                  "batch tokens and sequence length)");
  SEQBENCH_REQUIRE(step_ < 0 || (t.first_step <= step_ && step_ <= t.last_step),
                   "MemoryManager: tensor '" << t.name << "' used at step " << step_
                                             << ", outside its planned lifetime " << t.first_step << ".."
                                             << t.last_step
                                             << ": the run differs from the dry run the plan was made from");
  if (t.bytes == 0) return nullptr;
  return static_cast<char*>(block_) + plan_.offsets[id];
}

TensorId MemoryManager::id(std::string_view name) const {
  for (std::size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return i;
  SEQBENCH_FAIL("MemoryManager: no planned tensor is named '" << name << "'");
}

}  // namespace seqbench::layers
