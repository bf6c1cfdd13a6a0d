// The consumer of tests/install: one call into each installed library, through the installed
// headers, each checked against a value that follows from its documented behaviour. It needs no
// GPU: the launcher it calls rejects its arguments before touching the device. Exit 0 and the last
// line "seqbench consumer: ok" when every check holds; exit 1, naming the check, otherwise.
#include <cmath>
#include <cstdio>
#include <string>

#include "core/device_info.h"
#include "core/error.h"
#include "kernels/layernorm.h"
#include "layers/config.h"
#include "reference/layernorm.h"
#include "trainer/workspace.h"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("%s: %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

}  // namespace

int main() {
  // core: the static CUDA runtime links and answers, with a device or without one.
  const seqbench::DeviceProbe probe = seqbench::probe_device();
  check(probe.info.has_value() || !probe.reason.empty(), "core: probe_device gives a device or a reason");

  // reference: rows (1, 2, 3) and (4, 5, 9) have means 2 and 6 (to a few ulps of double).
  seqbench::ref::Matrix x(2, 3);
  x << 1, 2, 3, 4, 5, 9;
  const seqbench::ref::Vector gamma = seqbench::ref::Vector::Ones(3);
  const seqbench::ref::Vector beta = seqbench::ref::Vector::Zero(3);
  const seqbench::ref::LayerNormForward ln = seqbench::ref::layernorm_forward(x, gamma, beta, 1e-5);
  check(std::abs(ln.mean(0) - 2.0) < 1e-12 && std::abs(ln.mean(1) - 6.0) < 1e-12,
        "reference: layernorm_forward row means");

  // kernels: the host-side plan, and a launcher (device code in the library) that refuses hidden 0
  // with a seqbench::Error naming the value.
  const seqbench::kernels::LayerNormPlan plan =
      seqbench::kernels::layernorm_plan(seqbench::DType::f16, 1024, true);
  check(plan.elems_per_thread() > 0 && plan.team_threads > 0, "kernels: layernorm_plan");
  std::string refused;
  try {
    seqbench::kernels::launch_layernorm_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                       1, 0, 1e-5f, nullptr);
  } catch (const seqbench::Error& error) {
    refused = error.what();
  }
  check(refused.find("hidden") != std::string::npos, "kernels: launch_layernorm_forward refuses hidden 0");

  // layers: a preset validates and describes itself.
  const seqbench::layers::ModelPreset& big = seqbench::layers::preset("transformer-big");
  big.layer.validate();
  check(big.layer.hidden == 1024 &&
            seqbench::layers::describe(big.layer).find("hidden=1024") != std::string::npos,
        "layers: preset transformer-big");

  // trainer: 3 and 5 elements, each tensor starting on a multiple of 8: 8 + 8 = 16 per buffer.
  const seqbench::trainer::WorkspaceLayout layout({{"a", 3}, {"b", 5}});
  check(layout.total_elements() == 16 && layout.parameter_count() == 8, "trainer: WorkspaceLayout");

  if (failures != 0) {
    std::printf("seqbench consumer: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("seqbench consumer: ok\n");
  return 0;
}
