// update_rules_tool: the trajectories of reference/optimizers' steps (double) and of the loss
// scaler's state machine (trainer/loss_scaler.h) for cases read as JSON on stdin, written as JSON on
// stdout, so that tests/trainer/update_rules_torch_test.py can hold them against torch.optim and
// torch._amp_update_scale_: the rules are documented as PyTorch's, and torch is the oracle.
//
//   in:  {"optimizers": [{"kind": "adam" | "adamw" | "sgd", "lr": .., "beta1": .., "beta2": .., "eps": ..,
//                          "momentum": .., "dampening": .., "nesterov": .., "weight_decay": ..,
//                          "param": [..], "grads": [[..], ..]}],
//        "scalers": [{"init_scale": .., "growth_factor": .., "backoff_factor": .., "growth_interval": ..,
//                     "overflow": [true, false, ..]}]}
//   out: {"optimizers": [{"params": [[after step 1], ..]}],
//         "scalers": [{"scale": [after step 1, ..], "growth_tracker": [..]}]}
// Doubles are written with 17 significant digits (nlohmann's round trip), so nothing is lost.
// Exit 1 with a one-line error on input it cannot read.
#include <cstddef>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/optimizers.h"
#include "trainer/loss_scaler.h"

namespace {

using nlohmann::json;
using seqbench::ref::Vector;

Vector to_vector(const json& values) {
  const std::vector<double> v = values.get<std::vector<double>>();
  return Eigen::Map<const Vector>(v.data(), static_cast<Eigen::Index>(v.size()));
}

json optimizer_trajectory(const json& c) {
  const std::string kind = c.at("kind").get<std::string>();
  Vector param = to_vector(c.at("param"));
  seqbench::ref::AdamState adam;
  seqbench::ref::SgdState sgd;
  json params = json::array();
  for (const json& g : c.at("grads")) {
    const Vector grad = to_vector(g);
    if (grad.size() != param.size())
      throw std::runtime_error("a gradient's size differs from the parameter's");
    if (kind == "adam" || kind == "adamw") {
      seqbench::ref::AdamConfig config;
      config.lr = c.at("lr").get<double>();
      config.beta1 = c.at("beta1").get<double>();
      config.beta2 = c.at("beta2").get<double>();
      config.eps = c.at("eps").get<double>();
      config.weight_decay = c.at("weight_decay").get<double>();
      if (kind == "adam") {
        seqbench::ref::adam_step(param, grad, adam, config);
      } else {
        seqbench::ref::adamw_step(param, grad, adam, config);
      }
    } else if (kind == "sgd") {
      seqbench::ref::SgdConfig config;
      config.lr = c.at("lr").get<double>();
      config.momentum = c.at("momentum").get<double>();
      config.dampening = c.at("dampening").get<double>();
      config.weight_decay = c.at("weight_decay").get<double>();
      config.nesterov = c.at("nesterov").get<bool>();
      seqbench::ref::sgd_step(param, grad, sgd, config);
    } else {
      throw std::runtime_error("unknown optimizer kind '" + kind + "'");
    }
    params.push_back(std::vector<double>(param.data(), param.data() + param.size()));
  }
  return {{"params", params}};
}

json scaler_trajectory(const json& c) {
  seqbench::trainer::LossScalerConfig config;
  config.init_scale = c.at("init_scale").get<float>();
  config.growth_factor = c.at("growth_factor").get<double>();
  config.backoff_factor = c.at("backoff_factor").get<double>();
  config.growth_interval = c.at("growth_interval").get<int>();
  seqbench::trainer::validate_loss_scaler_config(config);
  seqbench::trainer::LossScalerState state = seqbench::trainer::initial_loss_scaler_state(config);
  json scale = json::array(), tracker = json::array();
  for (const json& overflow : c.at("overflow")) {
    state = seqbench::trainer::next_loss_scaler_state(state, overflow.get<bool>(), config);
    scale.push_back(static_cast<double>(state.scale));  // a float, exactly
    tracker.push_back(state.growth_tracker);
  }
  return {{"scale", scale}, {"growth_tracker", tracker}};
}

}  // namespace

int main() {
  try {
    const json in = json::parse(std::cin);
    json out = {{"optimizers", json::array()}, {"scalers", json::array()}};
    for (const json& c : in.value("optimizers", json::array()))
      out["optimizers"].push_back(optimizer_trajectory(c));
    for (const json& c : in.value("scalers", json::array())) out["scalers"].push_back(scaler_trajectory(c));
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "update_rules_tool: error: " << e.what() << "\n";
    return 1;
  }
}
