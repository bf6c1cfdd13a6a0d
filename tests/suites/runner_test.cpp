// The runner's timing loop on the CPU (suites/runner_detail.h): a fake sampler calls the work once
// and returns fixed times (graphed when asked), so that what time_experiments does with experiments that
// throw (while prepared or timed) is checked without a device: a failed check per failing variant, the
// experiment left out of the report, the others kept, every state freed before the next
// experiment is prepared, and the report still valid against the schema; an experiment asking for
// several calls a sample is prepared that many times and its calls rotate over the copies.
#include "suites/runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/check_result.h"
#include "suites/experiment.h"
#include "suites/report.h"
#include "suites/runner_detail.h"
#include "suites_test_util.h"

namespace seqbench {
namespace {

using runner_detail::time_experiments;

// Counts the experiment states alive, and the most that were alive when one was being prepared.
struct Liveness {
  int live = 0;
  int prepares = 0;
  int live_at_prepare = 0;  // the most states alive at the start of any prepare()
};

struct State {
  explicit State(Liveness& l) : liveness(l) { ++liveness.live; }
  ~State() { --liveness.live; }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  Liveness& liveness;
};

// How an experiment misbehaves.
struct Fault {
  bool prepare_throws = false;
  int throwing_variant = -1;  // this variant's work throws from its `throw_after`-th call on
  int throw_after = 0;
  std::size_t prepared_variants = 2;  // what prepare() returns (2 declared)
};

ExperimentSpec experiment(const std::string& name, Liveness& liveness, Fault fault = {}) {
  ExperimentSpec e;
  e.name = name;
  e.params = {{"n", 1}};
  e.baseline = "slow";
  e.variants = {{"slow", 1e6, 0}, {"fast", 1e6, 0}};
  e.prepare = [&liveness, fault, name] {
    liveness.live_at_prepare = std::max(liveness.live_at_prepare, liveness.live);
    ++liveness.prepares;
    if (fault.prepare_throws) throw std::runtime_error(name + ": no algorithm for this epilogue");
    auto state = std::make_shared<State>(liveness);
    auto calls = std::make_shared<int>(0);
    PreparedExperiment p;
    for (std::size_t v = 0; v < fault.prepared_variants; ++v) {
      p.variants.push_back([v, fault, calls, name](cudaStream_t) {
        if (static_cast<int>(v) == fault.throwing_variant && (*calls)++ >= fault.throw_after)
          throw std::runtime_error(name + ": out of memory");
      });
    }
    p.state = state;
    return p;
  };
  return e;
}

// One sample's calls of the work, then three samples (ms), taken the way the experiment asked.
TimedSamples fake_sample(const Work& work, bool cuda_graph, int calls_per_sample) {
  for (int c = 0; c < calls_per_sample; ++c) work(nullptr);
  return {{2.0, 1.0, 3.0}, cuda_graph, ""};
}

struct Outcome {
  nlohmann::json experiments;
  std::vector<CheckResult> failures;
  nlohmann::json report;
  std::string log;  // the progress lines
};

Outcome run(const std::vector<ExperimentSpec>& specs, int repetitions = 1,
            const runner_detail::Sampler& sampler = fake_sample) {
  SuiteSpec suite;
  suite.name = "fake";
  suite.experiments = specs;
  std::vector<const ExperimentSpec*> selected;
  for (const ExperimentSpec& e : suite.experiments) selected.push_back(&e);
  Outcome out;
  std::ostringstream log;
  out.experiments = time_experiments(suite, selected, sampler, 2950.0, repetitions, log, out.failures);
  out.log = log.str();
  // The report run_suites writes, on a valid report's meta (a device with copy_gbps 2950).
  out.report = testing::valid_report();
  out.report["suite"] = suite.name;
  out.report["experiments"] = out.experiments;
  out.report["checks"] = nlohmann::json::array();
  for (const CheckResult& c : out.failures) out.report["checks"].push_back(check_to_json(c));
  return out;
}

std::set<std::string> names_of(const nlohmann::json& experiments) {
  std::set<std::string> names;
  for (const auto& e : experiments) names.insert(e.at("name").get<std::string>());
  return names;
}

std::set<std::string> names_of(const std::vector<CheckResult>& failures) {
  std::set<std::string> names;
  for (const CheckResult& c : failures) names.insert(c.name);
  return names;
}

TEST(SuiteNames, EveryShippedSuitePassesAndDuplicatesOrBadVariantNamesAreRefused) {
  for (const bool quick : {false, true}) EXPECT_NO_THROW(all_suites(SuiteOptions{quick}));
  Liveness l;
  SuiteSpec suite;
  suite.name = "fake";
  suite.experiments = {experiment("a", l), experiment("b", l)};
  EXPECT_NO_THROW(require_unique_names(suite));
  suite.experiments.push_back(experiment("a", l));
  EXPECT_EQ(testing::error_message([&] { require_unique_names(suite); }),
            "suite 'fake': experiment name 'a' appears twice (names must be unique)");
  suite.experiments.pop_back();
  suite.experiments.push_back(experiment("", l));
  EXPECT_EQ(testing::error_message([&] { require_unique_names(suite); }),
            "suite 'fake': an experiment has an empty name");
  suite.experiments.pop_back();
  for (const std::string bad : {"", "x/y", "(summary)", "a b"}) {
    suite.experiments[1].variants[1].name = bad;
    EXPECT_EQ(testing::error_message([&] { require_unique_names(suite); }),
              "suite 'fake', experiment 'b': variant name '" + bad + "' is not letters, digits and '_'");
  }
  suite.experiments[1].variants[1].name = "slow";
  EXPECT_EQ(testing::error_message([&] { require_unique_names(suite); }),
            "suite 'fake', experiment 'b': variant name 'slow' appears twice");
}

TEST(SuiteNames, SelectSuitesTakesEachOnceInTheOrderFirstAsked) {
  // `seqbench dump --suite x --suite x` dumped x twice (run had its own de-duplication).
  const std::vector<SuiteSpec> all = all_suites(SuiteOptions{true});
  const auto names = [](const std::vector<const SuiteSpec*>& suites) {
    std::vector<std::string> out;
    for (const SuiteSpec* s : suites) out.push_back(s->name);
    return out;
  };
  EXPECT_EQ(names(select_suites(all, {"trainer", "operators", "trainer"})),
            (std::vector<std::string>{"trainer", "operators"}));
  EXPECT_EQ(select_suites(all, {}).size(), all.size());
  EXPECT_TRUE(testing::contains(testing::error_message([&] { select_suites(all, {"nope"}); }),
                                "unknown suite 'nope'"));
}

TEST(RunnerTimeExperiments, EveryExperimentMeasuredAndFreedBeforeTheNext) {
  Liveness l;
  const Outcome o = run({experiment("a", l), experiment("b", l)}, 2);
  EXPECT_TRUE(o.failures.empty());
  EXPECT_EQ(names_of(o.experiments), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(l.prepares, 2);  // once per experiment, not per variant or repetition
  EXPECT_EQ(l.live_at_prepare, 0);
  EXPECT_EQ(l.live, 0);
  for (const auto& e : o.experiments) {
    ASSERT_EQ(e.at("variants").size(), 2u);
    EXPECT_EQ(e.at("variants")[0].at("samples").get<int>(), 6);  // 3 samples x 2 repetitions
  }
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
}

TEST(RunnerTimeExperiments, PrepareThatThrowsIsAFailedCheckPerVariant) {
  Liveness l;
  Fault fault;
  fault.prepare_throws = true;
  const Outcome o = run({experiment("a", l), experiment("epilogue", l, fault), experiment("c", l)});
  EXPECT_EQ(names_of(o.experiments), (std::set<std::string>{"a", "c"}));
  // prepare() is not tried again for the second variant (review C), but each variant is its own
  // failed check, carrying the same error.
  EXPECT_EQ(names_of(o.failures),
            (std::set<std::string>{"run/fake/epilogue/slow", "run/fake/epilogue/fast"}));
  EXPECT_EQ(o.failures.size(), 2u);
  for (const CheckResult& c : o.failures) {
    EXPECT_FALSE(c.passed);
    EXPECT_NE(c.detail.find("no algorithm for this epilogue"), std::string::npos) << c.detail;
  }
  EXPECT_EQ(l.prepares, 3);  // a, epilogue once, c
  EXPECT_EQ(l.live_at_prepare, 0);
  EXPECT_EQ(l.live, 0);
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
}

TEST(RunnerTimeExperiments, TimingThatThrowsDropsTheExperimentAndFreesItsState) {
  Liveness l;
  Fault fault;
  fault.throwing_variant = 1;
  const Outcome o = run({experiment("a", l, fault), experiment("b", l)});
  EXPECT_EQ(names_of(o.experiments), (std::set<std::string>{"b"}));
  EXPECT_EQ(names_of(o.failures), (std::set<std::string>{"run/fake/a/fast"}));
  EXPECT_EQ(l.prepares, 2);
  EXPECT_EQ(l.live_at_prepare, 0);  // a's state went before b was prepared
  EXPECT_EQ(l.live, 0);
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
}

TEST(RunnerTimeExperiments, SamplesThatCannotBeSummarizedFailOnlyTheirExperiment) {
  // Times of 0 ms (calls that enqueue nothing, or under the events' resolution) give a p20 of 0,
  // which a report refuses: that ended the whole run, outside any experiment's failure.
  Liveness l;
  int sampled = 0;
  const runner_detail::Sampler sampler = [&](const Work& work, bool cuda_graph, int calls) {
    const bool zero = sampled++ < 2;  // a's two variants
    TimedSamples t = fake_sample(work, cuda_graph, calls);
    if (zero) t.ms = {0.0, 0.0, 0.0004};
    return t;
  };
  const Outcome o = run({experiment("a", l), experiment("b", l)}, 1, sampler);
  EXPECT_EQ(names_of(o.experiments), (std::set<std::string>{"b"}));
  ASSERT_EQ(o.failures.size(), 1u);
  EXPECT_EQ(o.failures[0].name, "run/fake/a/(summary)");
  EXPECT_NE(o.failures[0].detail.find("not reported: "), std::string::npos) << o.failures[0].detail;
  EXPECT_NE(o.failures[0].detail.find("not all positive"), std::string::npos) << o.failures[0].detail;
  EXPECT_NE(o.log.find("FAILED run/fake/a/(summary)"), std::string::npos) << o.log;
  EXPECT_EQ(l.live, 0);
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
}

TEST(RunnerTimeExperiments, FailureInALaterRepetitionStillDropsTheExperiment) {
  Liveness l;
  Fault fault;
  fault.throwing_variant = 0;
  fault.throw_after = 1;  // the first repetition is measured, the second throws
  const Outcome o = run({experiment("a", l, fault), experiment("b", l)}, 3);
  EXPECT_EQ(names_of(o.experiments), (std::set<std::string>{"b"}));
  EXPECT_EQ(names_of(o.failures), (std::set<std::string>{"run/fake/a/slow"}));
  EXPECT_EQ(o.failures.size(), 1u);
  EXPECT_EQ(l.live_at_prepare, 0);
  EXPECT_EQ(l.live, 0);
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
}

TEST(RunnerTimeExperiments, PrepareWithTheWrongVariantCountFailsEveryVariant) {
  // Before the fix the mis-sized experiment was kept after the first variant's error, and the
  // second variant indexed its one-element variant list at 1.
  Liveness l;
  Fault fault;
  fault.prepared_variants = 1;
  const Outcome o = run({experiment("a", l, fault), experiment("b", l)});
  EXPECT_EQ(names_of(o.experiments), (std::set<std::string>{"b"}));
  EXPECT_EQ(names_of(o.failures), (std::set<std::string>{"run/fake/a/slow", "run/fake/a/fast"}));
  for (const CheckResult& c : o.failures)
    EXPECT_NE(c.detail.find("prepared 1 variants, declared 2"), std::string::npos) << c.detail;
  EXPECT_EQ(l.live_at_prepare, 0);
  EXPECT_EQ(l.live, 0);
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
}

TEST(RunnerTimeExperiments, NotesThatThrowAreRecordedAndTheRunGoesOn) {
  // notes() runs after the experiment's last variant, outside the timing's try block: its error
  // used to leave the benchmark function and time_experiments (the whole run failed, no report).
  Liveness l;
  ExperimentSpec tuned = experiment("tuned", l);
  tuned.prepare = [inner = tuned.prepare] {
    PreparedExperiment p = inner();
    p.notes = []() -> nlohmann::json { throw std::runtime_error("tuner state unreadable"); };
    return p;
  };
  const Outcome o = run({tuned, experiment("b", l)});
  EXPECT_TRUE(o.failures.empty());
  ASSERT_EQ(names_of(o.experiments), (std::set<std::string>{"tuned", "b"}));
  const nlohmann::json& notes = o.experiments[0].at("notes");
  EXPECT_NE(notes.at("error").get<std::string>().find("tuner state unreadable"), std::string::npos);
  EXPECT_EQ(l.live, 0);
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
  // A later call registers afresh.
  const Outcome again = run({experiment("c", l)});
  EXPECT_EQ(names_of(again.experiments), (std::set<std::string>{"c"}));
}

TEST(RunnerTimeExperiments, ProgressLinesGiveEachRunsMedian) {
  // The lines used to carry Google Benchmark's full run name (".../iterations:1/repeats:1/
  // manual_time"), under which no samples are kept, so no line ever showed a median.
  Liveness l;
  Fault fault;
  fault.throwing_variant = 1;
  const Outcome o = run({experiment("a", l, fault)});
  EXPECT_NE(o.log.find("[1/2] fake/a/slow: median 2 ms (p20 "), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("[2/2] fake/a/fast: ERROR "), std::string::npos) << o.log;
  EXPECT_EQ(o.log.find("manual_time"), std::string::npos) << o.log;
}

TEST(RunnerTimeExperiments, EachVariantRecordsHowItWasTimed) {
  // Experiment "graphed" asks for CUDA graphs; its variant "fast" cannot be captured on its first
  // repetition (the sampler's fallback then says why) but is on the second: that variant is not
  // reported as graphed, and its note says how its repetitions were timed.
  Liveness l;
  ExperimentSpec direct = experiment("direct", l), graphed = experiment("graphed", l);
  graphed.cuda_graph = true;
  auto fast_calls = std::make_shared<int>(0);
  const auto prepare = graphed.prepare;
  graphed.prepare = [prepare, fast_calls] {
    PreparedExperiment p = prepare();
    p.variants[1] = [fast_calls](cudaStream_t) { ++*fast_calls; };
    return p;
  };
  std::vector<bool> requested;
  const runner_detail::Sampler sampler = [&](const Work& work, bool cuda_graph, int) {
    requested.push_back(cuda_graph);
    const int before = *fast_calls;
    work(nullptr);
    const bool refused = *fast_calls == 1 && before == 0;
    return TimedSamples{{2.0, 1.0, 3.0}, cuda_graph && !refused, refused ? "capture failed (a sync)" : ""};
  };
  const Outcome o = run({direct, graphed}, 2, sampler);
  EXPECT_TRUE(o.failures.empty());
  EXPECT_EQ(std::count(requested.begin(), requested.end(), true), 4);   // graphed: 2 variants x 2
  EXPECT_EQ(std::count(requested.begin(), requested.end(), false), 4);  // direct
  ASSERT_EQ(o.experiments.size(), 2u);
  for (const auto& e : o.experiments) {
    const auto& v = e.at("variants");
    ASSERT_EQ(v.size(), 2u);
    if (e.at("name") == "direct") {
      EXPECT_FALSE(v[0].at("cuda_graph").get<bool>());
      EXPECT_FALSE(v[1].at("cuda_graph").get<bool>());
      EXPECT_FALSE(v[0].contains("note"));
    } else {
      EXPECT_TRUE(v[0].at("cuda_graph").get<bool>());
      EXPECT_FALSE(v[0].contains("note"));
      EXPECT_FALSE(v[1].at("cuda_graph").get<bool>());  // one repetition was direct
      EXPECT_EQ(v[1].at("note"),
                "capture failed (a sync); 1 of 2 repetitions replayed a CUDA graph, the others launched "
                "directly; their samples are pooled");
    }
  }
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
  nlohmann::json bad = o.report;
  bad["experiments"][0]["variants"][0]["cuda_graph"] = "yes";
  bad["experiments"][0]["variants"][1]["note"] = 3;
  const std::vector<std::string> problems = validate_report(bad);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], "experiments[0].variants[0].cuda_graph: expected boolean, got string");
  EXPECT_EQ(problems[1], "experiments[0].variants[1].note: expected string, got integer");
}

TEST(RunnerTimeExperiments, ASampleRotatesOverCallsPerSampleCopies) {
  // "rotated" asks for 3 calls a sample: it is prepared 3 times, its copies live together and are
  // freed before "single" is prepared, the sampler is asked for 3 calls, and any 3 consecutive
  // calls of a variant run each copy once, across repetitions too. The notes are the first copy's.
  Liveness l;
  ExperimentSpec rotated = experiment("rotated", l), single = experiment("single", l);
  rotated.cuda_graph = true;
  rotated.calls_per_sample = 3;
  auto copies = std::make_shared<int>(0);
  auto ran = std::make_shared<std::vector<int>>();  // the copy each call of variant "fast" ran
  const auto prepare = rotated.prepare;
  rotated.prepare = [prepare, copies, ran] {
    PreparedExperiment p = prepare();
    const int copy = (*copies)++;
    p.variants[1] = [ran, copy](cudaStream_t) { ran->push_back(copy); };
    p.notes = [copy] { return nlohmann::json{{"copy", copy}}; };
    return p;
  };
  std::vector<int> asked;
  const runner_detail::Sampler sampler = [&](const Work& work, bool cuda_graph, int calls) {
    asked.push_back(calls);
    for (int c = 0; c < 2 * calls; ++c) work(nullptr);  // two samples' calls
    return TimedSamples{{2.0, 1.0, 3.0}, cuda_graph, ""};
  };
  const Outcome o = run({rotated, single}, 2, sampler);
  EXPECT_TRUE(o.failures.empty());
  EXPECT_EQ(l.prepares, 4);
  EXPECT_EQ(l.live_at_prepare, 2);  // the third copy's prepare: two copies alive, "single" none
  EXPECT_EQ(l.live, 0);
  EXPECT_EQ(asked, (std::vector<int>{3, 3, 3, 3, 1, 1, 1, 1}));
  EXPECT_EQ(*ran, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  ASSERT_EQ(o.experiments.size(), 2u);
  for (const auto& e : o.experiments) {
    const int calls = e.at("name") == "rotated" ? 3 : 1;
    for (const auto& v : e.at("variants")) EXPECT_EQ(v.at("calls_per_sample").get<int>(), calls) << e.dump();
  }
  EXPECT_EQ(o.experiments[0].at("notes"), (nlohmann::json{{"copy", 0}}));
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
  nlohmann::json bad = o.report;
  bad["experiments"][0]["variants"][0]["calls_per_sample"] = 0;
  bad["experiments"][0]["variants"][1]["calls_per_sample"] = 1.5;
  const std::vector<std::string> problems = validate_report(bad);
  ASSERT_EQ(problems.size(), 2u) << ::testing::PrintToString(problems);
  EXPECT_NE(problems[0].find("experiments[0].variants[0].calls_per_sample"), std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("experiments[0].variants[1].calls_per_sample"), std::string::npos)
      << problems[1];
}

TEST(RunnerTimeExperiments, CallsPerSampleOutsideItsRangeFailsTheExperiment) {
  Liveness l;
  for (const int calls : {0, kMaxCallsPerSample + 1}) {
    ExperimentSpec e = experiment("bad", l);
    e.calls_per_sample = calls;
    const Outcome o = run({e, experiment("good", l)});
    EXPECT_EQ(names_of(o.experiments), (std::set<std::string>{"good"}));
    ASSERT_EQ(o.failures.size(), 2u);
    EXPECT_NE(o.failures[0].detail.find("calls_per_sample " + std::to_string(calls) + " is outside 1..64"),
              std::string::npos)
        << o.failures[0].detail;
  }
  EXPECT_EQ(l.live, 0);
}

TEST(RunnerTimeExperiments, EveryExperimentFailingLeavesAValidReport) {
  Liveness l;
  Fault fault;
  fault.prepare_throws = true;
  const Outcome o = run({experiment("a", l, fault)});
  EXPECT_TRUE(o.experiments.empty());
  EXPECT_EQ(o.failures.size(), 2u);
  EXPECT_TRUE(validate_report(o.report).empty()) << o.report.dump(2);
}

// --- Run control (review A, B, C, F): the loop under TimingHooks, the check families, the merge. ---

struct Controlled {
  runner_detail::TimingOutcome outcome;
  std::vector<std::size_t> pending_after;   // pending.size() at each after_experiment
  std::vector<std::size_t> measured_after;  // experiments measured at each after_experiment
  std::string log;
};

Controlled run_controlled(const std::vector<ExperimentSpec>& specs, runner_detail::TimingHooks hooks) {
  SuiteSpec suite;
  suite.name = "fake";
  suite.experiments = specs;
  std::vector<const ExperimentSpec*> selected;
  for (const ExperimentSpec& e : suite.experiments) selected.push_back(&e);
  Controlled c;
  const auto user = hooks.after_experiment;
  hooks.after_experiment = [&c, user](const runner_detail::TimingOutcome& o,
                                      const std::vector<const ExperimentSpec*>& pending) {
    c.pending_after.push_back(pending.size());
    c.measured_after.push_back(o.experiments.size());
    if (user) user(o, pending);
  };
  std::ostringstream log;
  c.outcome = runner_detail::time_experiments_controlled(suite, selected, fake_sample, 2950.0, 1, log, hooks);
  c.log = log.str();
  return c;
}

std::map<std::string, std::string> not_run_of(const runner_detail::TimingOutcome& o) {
  std::map<std::string, std::string> out;
  for (const auto& n : o.not_run)
    out[n.at("experiment").get<std::string>()] = n.at("reason").get<std::string>();
  return out;
}

TEST(RunnerRunControl, AfterEveryExperimentTheOutcomeSoFarAndWhatIsPending) {
  Liveness l;
  const Controlled c = run_controlled({experiment("a", l), experiment("b", l), experiment("c", l)}, {});
  EXPECT_EQ(c.pending_after, (std::vector<std::size_t>{2, 1, 0}));
  EXPECT_EQ(c.measured_after, (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_TRUE(c.outcome.not_run.empty());
  EXPECT_FALSE(c.outcome.stopped);
}

TEST(RunnerRunControl, StartLineBeforeEachVariantAndSecondsAfter) {
  Liveness l;
  const Controlled c = run_controlled({experiment("a", l)}, {});
  const auto start = c.log.find("start fake/a/slow\n");
  const auto done = c.log.find("[1/2] fake/a/slow: median 2 ms");
  ASSERT_NE(start, std::string::npos) << c.log;
  ASSERT_NE(done, std::string::npos) << c.log;
  EXPECT_LT(start, done) << c.log;
  EXPECT_LT(c.log.find("start fake/a/fast\n"), c.log.find("[2/2] fake/a/fast")) << c.log;
  EXPECT_NE(c.log.find(" s)\n"), std::string::npos) << c.log;  // the elapsed seconds
}

TEST(RunnerRunControl, BudgetListsWhatItKeptFromStarting) {
  Liveness l;
  runner_detail::TimingHooks hooks;
  int asked = 0;
  hooks.may_not_start = [&asked] { return ++asked > 1 ? std::string("time budget") : std::string(); };
  const Controlled c = run_controlled({experiment("a", l), experiment("b", l), experiment("c", l)}, hooks);
  EXPECT_EQ(names_of(c.outcome.experiments), (std::set<std::string>{"a"}));
  EXPECT_EQ(not_run_of(c.outcome), (std::map<std::string, std::string>{{"b", "not started: time budget"},
                                                                       {"c", "not started: time budget"}}));
  EXPECT_EQ(c.outcome.not_started_budget, 2u);
  EXPECT_TRUE(c.outcome.failures.empty());
  EXPECT_EQ(l.prepares, 1);               // b and c were never prepared
  EXPECT_EQ(c.pending_after.size(), 3u);  // the report is rewritten for the unstarted ones too
}

TEST(RunnerRunControl, StopRequestStartsNothingNew) {
  Liveness l;
  runner_detail::TimingHooks hooks;
  bool stop = false;
  hooks.stop_requested = [&stop] { return stop; };
  hooks.stop_reason = "stopped by SIGTERM";
  hooks.after_experiment = [&stop](const runner_detail::TimingOutcome&,
                                   const std::vector<const ExperimentSpec*>&) {
    stop = true;  // the signal arrives during the first experiment
  };
  const Controlled c = run_controlled({experiment("a", l), experiment("b", l)}, hooks);
  EXPECT_EQ(names_of(c.outcome.experiments), (std::set<std::string>{"a"}));
  EXPECT_EQ(not_run_of(c.outcome),
            (std::map<std::string, std::string>{{"b", "not run: stopped by SIGTERM"}}));
  EXPECT_TRUE(c.outcome.stopped);
  EXPECT_EQ(l.prepares, 1);
}

TEST(RunnerRunControl, StopMidExperimentSkipsItsLaterVariants) {
  Liveness l;
  runner_detail::TimingHooks hooks;
  int calls = 0;
  hooks.stop_requested = [&calls] { return ++calls > 2; };  // while a's first variant runs
  const Controlled c = run_controlled({experiment("a", l), experiment("b", l)}, hooks);
  EXPECT_TRUE(c.outcome.experiments.empty());
  EXPECT_TRUE(c.outcome.failures.empty());  // not run is not failed
  EXPECT_EQ(not_run_of(c.outcome),
            (std::map<std::string, std::string>{{"a", "not run: stopped"}, {"b", "not run: stopped"}}));
  EXPECT_EQ(l.live, 0);
}

TEST(RunnerRunControl, StickyErrorStopsTheRunAndListsTheRest) {
  Liveness l;
  Fault fault;
  fault.throwing_variant = 0;
  runner_detail::TimingHooks hooks;
  int probes = 0;
  hooks.sticky_error = [&probes] {
    ++probes;
    return std::string("cudaErrorIllegalAddress: an illegal memory access was encountered");
  };
  const Controlled c = run_controlled(
      {experiment("a", l), experiment("b", l, fault), experiment("c", l), experiment("d", l)}, hooks);
  EXPECT_EQ(names_of(c.outcome.experiments), (std::set<std::string>{"a"}));
  // The one real failure is a failed check; nothing after it is recorded as its own failure.
  EXPECT_EQ(names_of(c.outcome.failures), (std::set<std::string>{"run/fake/b/slow"}));
  const std::string lost =
      "not run: device lost after fake/b/slow: cudaErrorIllegalAddress: an illegal memory access was "
      "encountered";
  // b is its failed check; everything after it is listed as not run, not failed.
  EXPECT_EQ(not_run_of(c.outcome), (std::map<std::string, std::string>{{"c", lost}, {"d", lost}}));
  EXPECT_EQ(c.outcome.device_lost,
            "after fake/b/slow: cudaErrorIllegalAddress: an illegal memory access was encountered");
  EXPECT_EQ(probes, 1);
  EXPECT_EQ(l.prepares, 2);  // c and d never prepared
  EXPECT_EQ(l.live, 0);
}

TEST(RunnerRunControl, ANonStickyFailureCostsOnlyItsExperiment) {
  Liveness l;
  Fault fault;
  fault.prepare_throws = true;
  runner_detail::TimingHooks hooks;
  int probes = 0;
  hooks.sticky_error = [&probes] {
    ++probes;
    return std::string();
  };
  const Controlled c = run_controlled({experiment("a", l, fault), experiment("b", l)}, hooks);
  EXPECT_EQ(names_of(c.outcome.experiments), (std::set<std::string>{"b"}));
  EXPECT_EQ(c.outcome.failures.size(), 2u);
  EXPECT_TRUE(c.outcome.not_run.empty());
  EXPECT_TRUE(c.outcome.device_lost.empty());
  EXPECT_EQ(probes, 2);
  EXPECT_EQ(l.prepares, 2);  // a once (not again for its second variant), b once
}

TEST(RunnerStopSignals, SigtermWithinTheScopeSetsAFlagAndTheScopeRestoresTheHandler) {
  static volatile std::sig_atomic_t outer = 0;
  const auto previous = std::signal(SIGTERM, [](int) { outer = 1; });
  {
    const runner_detail::StopSignalScope scope;
    EXPECT_EQ(runner_detail::StopSignalScope::received(), 0);
    std::raise(SIGTERM);  // would end the test binary without the scope's handler
    EXPECT_EQ(runner_detail::StopSignalScope::received(), SIGTERM);
    EXPECT_EQ(outer, 0);
  }
  std::raise(SIGTERM);  // the handler from before the scope is back
  EXPECT_EQ(outer, 1);
  std::signal(SIGTERM, previous);
}

// A log that raises SIGTERM (once) when the text written to it first contains `trigger`: a signal
// at a chosen point of run_suites, without a device.
class SignalingLog : public std::streambuf {
 public:
  explicit SignalingLog(std::string trigger) : trigger_(std::move(trigger)) {}
  std::string text;

 protected:
  int overflow(int c) override {
    if (c != traits_type::eof()) text.push_back(static_cast<char>(c));
    if (!raised_ && text.find(trigger_) != std::string::npos) {
      raised_ = true;
      std::raise(SIGTERM);
    }
    return c;
  }

 private:
  std::string trigger_;
  bool raised_ = false;
};

RunResult run_reference_with_sigterm_at(const std::string& trigger, const std::filesystem::path& out) {
  SignalingLog buffer(trigger);
  std::ostream log(&buffer);
  RunOptions options;
  options.suites = {"reference"};
  options.out_dir = out;
  return run_suites(options, log);
}

TEST(RunnerStopSignals, ASigtermBeforeTheSuiteStopsItAndSaysSo) {
  const ::seqbench::testing::ScratchDir dir;
  const RunResult r = run_reference_with_sigterm_at("seqbench run: ", dir.path());
  EXPECT_EQ(r.stopped_by, "stopped by SIGTERM");
  ASSERT_EQ(r.not_run.size(), 1u);
  EXPECT_EQ(r.not_run[0], "reference: not run: stopped by SIGTERM");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "reference.json"));
}

TEST(RunnerStopSignals, ASigtermAfterTheLastReportStoppedNothing) {
  const ::seqbench::testing::ScratchDir dir;
  const RunResult r = run_reference_with_sigterm_at("  wrote ", dir.path());
  EXPECT_EQ(r.stopped_by, "");  // nothing was left unrun: complete, not "incomplete: stopped"
  EXPECT_TRUE(r.not_run.empty());
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "reference.json"));
}

TEST(RunnerCheckFamilies, AFamilyThatThrowsIsANamedFailedCheck) {
  const auto ok = checks_or_failure("fake/gpu", [] {
    CheckResult c;
    c.name = "fake/x";
    c.passed = true;
    return std::vector<CheckResult>{c};
  });
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].name, "fake/x");
  const auto threw = checks_or_failure("fake/gpu", []() -> std::vector<CheckResult> {
    throw std::runtime_error("cuBLASLt has no algorithm for this epilogue");
  });
  ASSERT_EQ(threw.size(), 1u);
  EXPECT_EQ(threw[0].name, "checks/fake/gpu");
  EXPECT_FALSE(threw[0].passed);
  EXPECT_TRUE(testing::contains(threw[0].detail, "cuBLASLt has no algorithm for this epilogue"));
  nlohmann::json report = testing::valid_report();
  report["checks"].push_back(check_to_json(threw[0]));
  EXPECT_TRUE(validate_report(report).empty()) << report.dump(2);
}

// A report as run_suites writes it: meta with quick, filter and one part.
nlohmann::json runner_report(const std::string& filter, bool quick = false) {
  nlohmann::json r = testing::valid_report();
  r["meta"]["quick"] = quick;
  r["meta"]["filter"] = filter.empty() ? nlohmann::json(nullptr) : nlohmann::json(filter);
  r["meta"]["repetitions"] = 1;
  r["meta"]["parts"] = nlohmann::json::array({{{"timestamp", r["meta"]["timestamp"]},
                                               {"host", "h"},
                                               {"git_dirty", false},
                                               {"filter", r["meta"]["filter"]},
                                               {"quick", quick}}});
  return r;
}

// --keep-checks keeps a report's checks only when an unfiltered part ran them and no family failed.
TEST(RunnerMerge, ChecksAreKeepableOnlyWhenWhole) {
  EXPECT_EQ(runner_detail::checks_not_keepable(runner_report("")), "");
  EXPECT_EQ(runner_detail::checks_not_keepable(runner_report("x")),
            "no part of the report ran them unfiltered");
  // An unfiltered part that kept earlier checks did not run them; a later part's filter is irrelevant.
  nlohmann::json kept = runner_report("");
  kept["meta"]["parts"][0]["checks_run"] = false;
  EXPECT_EQ(runner_detail::checks_not_keepable(kept), "no part of the report ran them unfiltered");
  nlohmann::json two = runner_report("");
  two["meta"]["parts"].push_back({{"filter", "x"}, {"checks_run", false}});
  EXPECT_EQ(runner_detail::checks_not_keepable(two), "");
  // A report older than meta.parts: its meta is its one part.
  nlohmann::json old = runner_report("");
  old["meta"].erase("parts");
  EXPECT_EQ(runner_detail::checks_not_keepable(old), "");
  old["meta"]["filter"] = "x";
  EXPECT_EQ(runner_detail::checks_not_keepable(old), "no part of the report ran them unfiltered");
  // A failed family of this suite; a failed ordinary check or another prefix does not count.
  nlohmann::json failed = runner_report("");
  failed["checks"][0]["passed"] = false;
  failed["checks"][0]["name"] = "run/layernorm/layernorm_fwd/fused";
  EXPECT_EQ(runner_detail::checks_not_keepable(failed), "");
  failed["checks"][0]["name"] = "checks/layernorm/gpu/softmax";
  EXPECT_EQ(runner_detail::checks_not_keepable(failed),
            "a check family failed (checks/layernorm/gpu/softmax)");
}

TEST(RunnerMerge, RefusesAnotherSuiteDeviceShaOrQuickSetting) {
  const nlohmann::json old = runner_report("");
  const nlohmann::json meta = runner_report("x")["meta"];
  EXPECT_NO_THROW(runner_detail::require_mergeable(old, meta, "layernorm", "'old.json'"));
  EXPECT_TRUE(testing::contains(
      testing::error_message([&] { runner_detail::require_mergeable(old, meta, "softmax", "'old.json'"); }),
      "it holds suite 'layernorm', this run 'softmax'"));
  nlohmann::json other = meta;
  other["device"]["name"] = "NVIDIA H200";
  EXPECT_TRUE(testing::contains(testing::error_message([&] {
                                  runner_detail::require_mergeable(old, other, "layernorm", "'old.json'");
                                }),
                                "measured on NVIDIA H100 80GB HBM3, this run on NVIDIA H200"));
  other = meta;
  other["git_sha"] = "0123456789abcdef0123456789abcdef01234567";
  EXPECT_TRUE(testing::contains(
      testing::error_message(
          [&] { runner_detail::require_mergeable(old, other, "layernorm", "'old.json'"); }),
      "it holds git sha 3f5c2a9e8b7d6c5f4e3a2b1c0d9e8f7a6b5c4d3e, this run 0123456789abcdef"));
  // unknown == unknown is no match: neither build says what it was built from.
  nlohmann::json unknown_old = old;
  unknown_old["meta"]["git_sha"] = "unknown";
  other = meta;
  other["git_sha"] = "unknown";
  EXPECT_TRUE(testing::contains(testing::error_message([&] {
                                  runner_detail::require_mergeable(unknown_old, other, "layernorm",
                                                                   "'o.json'");
                                }),
                                "git sha 'unknown'"));
  EXPECT_TRUE(testing::contains(
      testing::error_message([&] { runner_detail::require_mergeable(old, other, "layernorm", "'o.json'"); }),
      "run tools/stamp.sh"));
  other = meta;
  other["quick"] = true;
  EXPECT_TRUE(testing::contains(testing::error_message([&] {
                                  runner_detail::require_mergeable(old, other, "layernorm", "'old.json'");
                                }),
                                "it holds a full run, this run is --quick"));
  nlohmann::json no_quick = old;
  no_quick["meta"].erase("quick");
  EXPECT_TRUE(testing::contains(testing::error_message([&] {
                                  runner_detail::require_mergeable(no_quick, meta, "layernorm", "'old.json'");
                                }),
                                "records no quick flag"));
}

TEST(RunnerMerge, OneShaIsNotOneBuildTheSourceHashOrCleanTreesDecide) {
  const std::string hash_a(64, 'a'), hash_b(64, 'b');
  nlohmann::json old = runner_report("");
  nlohmann::json meta = runner_report("x")["meta"];
  const auto refusal = [&] {
    return testing::error_message(
        [&] { runner_detail::require_mergeable(old, meta, "layernorm", "'o.json'"); });
  };
  // Both dirty (a report unpacked into an uncommitted tree), one sha, other sources: refused.
  old["meta"]["git_dirty"] = meta["git_dirty"] = true;
  old["meta"]["source_hash"] = hash_a;
  meta["source_hash"] = hash_b;
  EXPECT_TRUE(testing::contains(
      refusal(), "built from other sources (source hash aaaaaaaaaaaa, this run bbbbbbbbbbbb)"));
  meta["source_hash"] = hash_a;  // the same sources: dirty or not, one build
  EXPECT_NO_THROW(runner_detail::require_mergeable(old, meta, "layernorm", "'o.json'"));
  // Without a hash on either side, a dirty part is refused; clean ones still merge by sha.
  meta["source_hash"] = nullptr;
  EXPECT_TRUE(testing::contains(refusal(), "this run records no source hash"));
  old["meta"].erase("source_hash");
  meta["source_hash"] = hash_a;
  old["meta"]["git_dirty"] = false;
  EXPECT_TRUE(testing::contains(refusal(), "a part is dirty (uncommitted source changes) and it records no"));
  meta["git_dirty"] = false;
  EXPECT_NO_THROW(runner_detail::require_mergeable(old, meta, "layernorm", "'o.json'"));
}

TEST(RunnerMerge, AnOldFamilyFailureGoesOnlyWhenThisRunRanThatFamily) {
  nlohmann::json old = runner_report("");
  for (const char* name : {"checks/layernorm/gpu", "checks/layernorm/gpu/softmax", "checks/layernorm/cpu"})
    old["checks"].push_back(check_to_json(CheckResult{name, false, 0, 0, 0, "threw", {}}));
  nlohmann::json fresh = runner_report("layernorm_fwd");
  fresh["checks"] = nlohmann::json::array();
  fresh["meta"]["check_families"] = nlohmann::json::array({"gpu"});
  const nlohmann::json merged = runner_detail::merge_reports(old, fresh);
  std::set<std::string> names;
  for (const auto& c : merged["checks"]) names.insert(c["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"layernorm_fwd vs reference", "layernorm_bwd vs reference",
                                          "checks/layernorm/cpu"}));
}

TEST(RunnerMerge, AFilteredPartReplacesByNameAndKeepsTheRest) {
  nlohmann::json old = runner_report("");
  nlohmann::json second = old["experiments"][0];
  second["name"] = "layernorm_bwd";
  old["experiments"].push_back(second);
  old["not_run"] =
      nlohmann::json::array({{{"experiment", "softmax_fwd"}, {"reason", "not started: time budget"}}});
  nlohmann::json run_failure = testing::failed_check("run/layernorm/layernorm_fwd/fused");
  run_failure["detail"] = "not measured: out of memory";
  old["checks"].push_back(run_failure);
  nlohmann::json fresh = runner_report("layernorm_fwd|softmax_fwd");
  fresh["meta"]["timestamp"] = "2026-11-23T10:00:00Z";
  fresh["meta"]["parts"][0]["timestamp"] = "2026-11-23T10:00:00Z";
  fresh["meta"]["parts"][0]["git_dirty"] = true;
  fresh["meta"]["git_dirty"] = true;
  fresh["experiments"][0]["variants"][1]["samples"] = 123;
  nlohmann::json softmax = fresh["experiments"][0];
  softmax["name"] = "softmax_fwd";
  fresh["experiments"].push_back(softmax);
  fresh["checks"] = nlohmann::json::array({old["checks"][0]});
  fresh["checks"][0]["max_abs_err"] = 0.001;
  fresh["not_run"] = nlohmann::json::array();

  const nlohmann::json merged = runner_detail::merge_reports(old, fresh);
  EXPECT_EQ(validate_report(merged), std::vector<std::string>{});
  ASSERT_EQ(merged["experiments"].size(), 3u);
  EXPECT_EQ(merged["experiments"][0]["name"], "layernorm_bwd");  // kept
  EXPECT_EQ(merged["experiments"][1]["name"], "layernorm_fwd");  // replaced
  EXPECT_EQ(merged["experiments"][1]["variants"][1]["samples"], 123);
  EXPECT_EQ(merged["experiments"][2]["name"], "softmax_fwd");
  std::set<std::string> checks;
  for (const auto& c : merged["checks"]) checks.insert(c["name"].get<std::string>());
  // The old run/ failure of the re-measured experiment and the replaced check are gone; the other old check
  // stays.
  EXPECT_EQ(checks, (std::set<std::string>{"layernorm_fwd vs reference", "layernorm_bwd vs reference"}));
  for (const auto& c : merged["checks"]) {
    if (c["name"] == "layernorm_fwd vs reference") {
      EXPECT_EQ(c["max_abs_err"], 0.001);
    }
  }
  EXPECT_TRUE(merged["not_run"].empty());  // softmax_fwd is measured now
  ASSERT_EQ(merged["meta"]["parts"].size(), 2u);
  EXPECT_EQ(merged["meta"]["parts"][1]["filter"], "layernorm_fwd|softmax_fwd");
  EXPECT_EQ(merged["meta"]["timestamp"], "2026-11-23T10:00:00Z");
  EXPECT_TRUE(merged["meta"]["git_dirty"].get<bool>());
}

}  // namespace
}  // namespace seqbench
