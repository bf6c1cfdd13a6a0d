#include "trainer/optimizer_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "core/error.h"

namespace seqbench::trainer {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the state file format is written as little-endian");

constexpr char kMagic[8] = {'s', 'e', 'q', 'b', 'o', 'p', 't', '\x01'};

std::uint64_t fnv1a(std::string_view bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

template <class V>
void put(std::string& out, V value) {
  char raw[sizeof(V)];
  std::memcpy(raw, &value, sizeof(V));
  out.append(raw, sizeof(V));
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& what) : bytes_(bytes), what_(what) {}
  template <class V>
  V get(const char* field) {
    need(sizeof(V), field);
    V value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(V));
    at_ += sizeof(V);
    return value;
  }
  std::vector<float> floats(std::uint64_t n, const char* field) {
    SEQBENCH_REQUIRE(n <= (bytes_.size() - at_) / sizeof(float),
                     what_ << ": " << field << " claims " << n << " floats but only " << bytes_.size() - at_
                           << " bytes remain");
    std::vector<float> values(static_cast<std::size_t>(n));
    if (n > 0) std::memcpy(values.data(), bytes_.data() + at_, n * sizeof(float));
    at_ += n * sizeof(float);
    return values;
  }
  std::size_t position() const { return at_; }

 private:
  void need(std::size_t n, const char* field) {
    SEQBENCH_REQUIRE(bytes_.size() - at_ >= n, what_ << ": truncated at byte " << at_ << " (reading " << field
                                                     << ", file has " << bytes_.size() << " bytes)");
  }
  std::string_view bytes_;
  const std::string& what_;
  std::size_t at_ = 0;
};

[[noreturn]] void fail_write(const std::filesystem::path& path, const std::string& step, int err) {
  SEQBENCH_FAIL("cannot write optimizer state '" << path.string() << "': " << step << ": "
                                                 << std::system_category().message(err));
}

}  // namespace

void validate_snapshot(const OptimizerStateSnapshot& s) {
  optimizer_kind_name(s.kind);
  precision_mode_name(s.mode);
  // The next step counts t = step + 1 (make_step_control): INT64_MAX would overflow it.
  SEQBENCH_REQUIRE(s.step >= 0 && s.step < std::numeric_limits<std::int64_t>::max(),
                   "optimizer state: step " << s.step << " must be >= 0 and < "
                                            << std::numeric_limits<std::int64_t>::max());
  const struct {
    const char* name;
    std::size_t size;
  } arrays[] = {{"state0", s.state0.size()}, {"state1", s.state1.size()}, {"master", s.master.size()}};
  for (const auto& a : arrays)
    SEQBENCH_REQUIRE(
        a.size == 0 || a.size == s.count,
        "optimizer state: " << a.name << " has " << a.size << " elements, expected 0 or count " << s.count);
}

std::string serialize_optimizer_state(const OptimizerStateSnapshot& s) {
  validate_snapshot(s);
  std::string out(kMagic, sizeof kMagic);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(s.kind));
  put<std::uint32_t>(out, static_cast<std::uint32_t>(s.mode));
  put<std::uint64_t>(out, s.count);
  put<std::int64_t>(out, s.step);
  for (const auto* array : {&s.state0, &s.state1, &s.master}) put<std::uint64_t>(out, array->size());
  for (const auto* array : {&s.state0, &s.state1, &s.master})
    out.append(reinterpret_cast<const char*>(array->data()), array->size() * sizeof(float));
  put<std::uint64_t>(out, fnv1a(out));
  return out;
}

OptimizerStateSnapshot deserialize_optimizer_state(std::string_view bytes, const std::string& what) {
  SEQBENCH_REQUIRE(bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
                   what << ": not a seqbench optimizer state (version 1): bad magic");
  SEQBENCH_REQUIRE(bytes.size() >= sizeof kMagic + sizeof(std::uint64_t),
                   what << ": truncated (" << bytes.size() << " bytes)");
  const std::string_view body = bytes.substr(0, bytes.size() - sizeof(std::uint64_t));
  std::uint64_t stored_hash;
  std::memcpy(&stored_hash, bytes.data() + body.size(), sizeof stored_hash);

  Reader in(body, what);
  in.get<std::uint64_t>("magic");
  OptimizerStateSnapshot s;
  const auto kind = in.get<std::uint32_t>("kind");
  const auto mode = in.get<std::uint32_t>("mode");
  SEQBENCH_REQUIRE(kind <= static_cast<std::uint32_t>(OptimizerKind::sgd),
                   what << ": unknown optimizer kind " << kind);
  SEQBENCH_REQUIRE(mode <= static_cast<std::uint32_t>(PrecisionMode::stochastic_rounding),
                   what << ": unknown precision mode " << mode);
  s.kind = static_cast<OptimizerKind>(kind);
  s.mode = static_cast<PrecisionMode>(mode);
  s.count = in.get<std::uint64_t>("count");
  s.step = in.get<std::int64_t>("step");
  const auto n0 = in.get<std::uint64_t>("n_state0");
  const auto n1 = in.get<std::uint64_t>("n_state1");
  const auto nm = in.get<std::uint64_t>("n_master");
  s.state0 = in.floats(n0, "state0");
  s.state1 = in.floats(n1, "state1");
  s.master = in.floats(nm, "master");
  SEQBENCH_REQUIRE(in.position() == body.size(),
                   what << ": " << body.size() - in.position() << " unexpected bytes after the arrays");
  SEQBENCH_REQUIRE(fnv1a(body) == stored_hash, what << ": hash mismatch (the file is corrupt)");
  validate_snapshot(s);
  return s;
}

void write_optimizer_state(const std::filesystem::path& path, const OptimizerStateSnapshot& snapshot) {
  SEQBENCH_REQUIRE(path.has_filename(),
                   "cannot write optimizer state '" << path.string() << "': names no file");
  const std::string bytes = serialize_optimizer_state(snapshot);
  const std::filesystem::path dir =
      path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  // pid + a process-wide counter: unique among live writers; O_EXCL turns a stale leftover into a
  // retry rather than a shared file.
  static std::atomic<unsigned long> counter{0};
  std::filesystem::path temp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    // Built in steps: GCC 12 -O3 warns falsely (-Wrestrict) on the one-expression form.
    std::string name(1, '.');
    name += path.filename().string();
    name += ".tmp.";
    name += std::to_string(::getpid());
    name += '.';
    name += std::to_string(counter++);
    temp = dir / name;
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) fail_write(path, "cannot create a temporary file in '" + dir.string() + "'", errno);
  auto abandon = [&](const std::string& step) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    fail_write(path, step, err);
  };
  std::string_view rest = bytes;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write failed");
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::fsync(fd) != 0) abandon("fsync failed");
  const int rc = ::close(fd);
  fd = -1;
  if (rc != 0) abandon("close failed");
  if (::rename(temp.c_str(), path.c_str()) != 0) abandon("rename failed");
}

OptimizerStateSnapshot read_optimizer_state(const std::filesystem::path& path) {
  // A directory opens as a stream on Linux and reads as empty: say what it is instead of "bad magic".
  std::error_code ec;
  SEQBENCH_REQUIRE(!std::filesystem::is_directory(path, ec),
                   "cannot read optimizer state '" << path.string() << "': it is a directory");
  std::ifstream file(path, std::ios::binary);
  SEQBENCH_REQUIRE(file, "cannot read optimizer state '" << path.string() << "': cannot open it");
  std::ostringstream contents;
  contents << file.rdbuf();
  SEQBENCH_REQUIRE(!file.bad(), "cannot read optimizer state '" << path.string() << "': read failed");
  return deserialize_optimizer_state(contents.str(), "optimizer state '" + path.string() + "'");
}

}  // namespace seqbench::trainer
