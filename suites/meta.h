// The "meta" block of every report: what ran, where, when, built how.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/device_info.h"

namespace seqbench {

// `copy_gbps` is the copy bandwidth this run measured on the device (null when not measured).
nlohmann::json collect_meta(std::uint64_t seed, const DeviceProbe& probe, std::optional<double> copy_gbps);

// The build and the device alone (meta.build and meta.device), for `seqbench info`.
nlohmann::json build_json();
nlohmann::json device_json(const DeviceProbe& probe, std::optional<double> copy_gbps);

// A folder name for a device's reports: "nvidia-h100-80gb-hbm3"; "cpu" without a GPU.
std::string device_slug(const DeviceProbe& probe);

// UTC now as ISO 8601 with a Z suffix: "2026-11-22T10:00:00Z".
std::string utc_timestamp();

}  // namespace seqbench
