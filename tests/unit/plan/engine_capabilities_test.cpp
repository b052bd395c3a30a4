// config.engine: parsed, resolved and hashed (plan.h), and the engines' capability table
// (engine_capabilities.h).
#include "plan/engine_capabilities.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace trainer::plan {
namespace {

// A plan of `method` on `engine` with `extra` written into its config ("" = nothing more).
Plan plan_of(const std::string& method, const std::string& engine, const std::string& extra = "",
             const std::string& top = "") {
  std::string text = R"({"kind": "run", "workload": "w", "config": {"dataset": "d", "method": ")" + method + "\"";
  if (!engine.empty()) text += R"(, "engine": ")" + engine + "\"";
  if (!extra.empty()) text += ", " + extra;
  text += "}" + (top.empty() ? std::string() : ", " + top) + "}";
  Result<Plan> p = parse_plan(text, "plan.json");
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p.is_ok() ? *p : Plan{};
}

TEST(EngineField, DefaultsToNativeAndIsShownResolved) {
  const Plan p = plan_of("sft", "");
  EXPECT_EQ(p.config.engine, Engine::kNative);
  EXPECT_EQ(to_json(p)["config"]["engine"], "native");
  EXPECT_EQ(config_to_json(plan_of("grpo", "trl").config)["engine"], "trl");
  // The resolved plan parses back to the same engine.
  Result<Plan> again = plan_from_json(to_json(plan_of("grpo", "trl")), "resolved");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->config.engine, Engine::kTrl);
}

TEST(EngineField, UnknownEngineIsRefusedNamingTheFieldAndTheAllowedValues) {
  Result<Plan> p = parse_plan(R"({"kind": "run", "workload": "w", "config": {"dataset": "d", "engine": "deepspeed"}})",
                              "plan.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.engine");
  EXPECT_EQ(p.status().message(), "must be one of \"native\", \"trl\", \"verl\", got \"deepspeed\"");
}

TEST(EngineField, NativeKeepsTheHashOfPlansWrittenBeforeEnginesAndOthersChangeIt) {
  const Plan native = plan_of("sft", "native");
  const Plan unwritten = plan_of("sft", "");
  const Plan trl = plan_of("sft", "trl");
  EXPECT_EQ(settings_sha(native.config, "h"), settings_sha(unwritten.config, "h"));
  EXPECT_FALSE(flatten_config(native.config, "h").contains("config.engine"));
  EXPECT_NE(settings_sha(trl.config, "h"), settings_sha(native.config, "h"));
  EXPECT_EQ(flatten_config(trl.config, "h")["config.engine"], "trl");
}

TEST(EngineCapabilities, NativeAndTrlTrainPlainSftAndGrpoPlans) {
  const EngineDeployment here;
  for (const char* method : {"sft", "grpo", "gspo"}) {
    EXPECT_TRUE(check_engine_capabilities(plan_of(method, "native"), here).is_ok()) << method;
    EXPECT_TRUE(check_engine_capabilities(plan_of(method, "trl"), here).is_ok()) << method;
  }
}

TEST(EngineCapabilities, TrlRefusesWhatItsWorkerDoesNotTranslateYet) {
  const EngineDeployment here;
  Status packing = check_engine_capabilities(plan_of("sft", "trl", R"("hyperparams": {"training": {"packing": true}})"), here);
  EXPECT_EQ(packing.field(), "config.hyperparams.training.packing");
  EXPECT_EQ(packing.message().rfind("engine trl cannot run this: ", 0), 0u) << packing.message();
  Status split =
      check_engine_capabilities(plan_of("sft", "trl", R"("hyperparams": {"training": {"validationSplit": 0.1}})"), here);
  EXPECT_EQ(split.field(), "config.hyperparams.training.validationSplit");
  Status validation = check_engine_capabilities(plan_of("sft", "trl", R"("validationDataset": "v")"), here);
  EXPECT_EQ(validation.field(), "config.validationDataset");
  EXPECT_TRUE(
      check_engine_capabilities(plan_of("sft", "native", R"("hyperparams": {"training": {"packing": true}})"), here).is_ok());
}

TEST(EngineCapabilities, TrlRefusesWhatItsTranslationLacksNamingEngineAndField) {
  const EngineDeployment here;
  Status stops = check_engine_capabilities(plan_of("grpo", "trl", R"("rlHyperparams": {"stopStrings": ["\n"]})"), here);
  EXPECT_EQ(stops.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(stops.field(), "config.rlHyperparams.stopStrings");
  EXPECT_EQ(stops.message().rfind("engine trl cannot run this: ", 0), 0u) << stops.message();
  Status tools = check_engine_capabilities(
      plan_of("grpo", "trl", R"("rlHyperparams": {"tools": {"command": "/bin/tool"}})"), here);
  EXPECT_EQ(tools.field(), "config.rlHyperparams.tools");
  Status gpus = check_engine_capabilities(plan_of("sft", "trl", "", R"("execution": {"gpus": 2})"), here);
  EXPECT_EQ(gpus.field(), "execution.gpus");
  EXPECT_NE(gpus.message().find("engine trl"), std::string::npos);
  Status smoke = check_engine_capabilities(plan_of("sft", "trl", "", R"("smoke": true)"), here);
  EXPECT_EQ(smoke.field(), "smoke");
  // The same plans on the native engine pass.
  EXPECT_TRUE(check_engine_capabilities(plan_of("grpo", "native", R"("rlHyperparams": {"stopStrings": ["\n"]})"), here)
                  .is_ok());
  EXPECT_TRUE(check_engine_capabilities(plan_of("sft", "native", "", R"("smoke": true)"), here).is_ok());
}

// verl's FSDP engine has no linear schedule, the plan's default: a verl plan names another.
const std::string kVerlSchedule = R"("rlHyperparams": {"optimizer": {"schedule": "cosine"}})";

TEST(EngineCapabilities, VerlRefusesWhatItsConfigurationHasNoCounterpartFor) {
  const EngineDeployment everything{.ray_backend = true, .gpu_rollout_engine = true};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"config.rlHyperparams.optimizer.schedule", ""},
      {"config.rlHyperparams.lossAggregation",
       R"("rlHyperparams": {"lossAggregation": "bnpo", "optimizer": {"schedule": "cosine"}})"},
      {"config.rlHyperparams.scaleRewards",
       R"("rlHyperparams": {"scaleRewards": "batch", "optimizer": {"schedule": "cosine"}})"},
      {"config.hyperparams.lora.dropout", R"("hyperparams": {"lora": {"dropout": 0.1}}, )" + kVerlSchedule},
      {"config.hyperparams.training.maxSteps",
       R"("hyperparams": {"training": {"maxSteps": 3}}, "rlHyperparams": {"iterationsPerBatch": 2, )"
       R"("optimizer": {"schedule": "cosine"}})"},
  };
  for (const auto& [field, extra] : cases) {
    Status st = check_engine_capabilities(plan_of("grpo", "verl", extra), everything);
    EXPECT_EQ(st.field(), field) << st.to_string();
    EXPECT_NE(st.message().find("engine verl cannot run this"), std::string::npos) << st.to_string();
  }
  EXPECT_EQ(check_engine_capabilities(plan_of("grpo", "verl", kVerlSchedule, R"("pauseAtStep": 2)"), everything)
                .field(),
            "pauseAtStep");
  EXPECT_TRUE(check_engine_capabilities(plan_of("gspo", "verl", kVerlSchedule), everything).is_ok());
}

TEST(EngineCapabilities, VerlRefusesSftAndCpuRunsThenNamesWhatTheDeploymentLacks) {
  const EngineDeployment here;
  Status sft = check_engine_capabilities(plan_of("sft", "verl", "", R"("execution": {"gpus": 1})"), here);
  EXPECT_EQ(sft.field(), "config.method");
  EXPECT_NE(sft.message().find("engine verl"), std::string::npos);
  Status cpu = check_engine_capabilities(plan_of("grpo", "verl", "", R"("execution": {"gpus": 0})"), here);
  EXPECT_EQ(cpu.field(), "execution.gpus");
  Status missing = check_engine_capabilities(plan_of("grpo", "verl", kVerlSchedule), here);
  EXPECT_EQ(missing.field(), "config.engine");
  EXPECT_EQ(missing.message(),
            "engine verl is not available on this deployment: it has verl 0.9.1 and the plan's translation into verl's "
            "configuration, and needs a GPU rollout engine (vLLM or SGLang on CUDA devices; this deployment has none) "
            "and the Ray compute backend (compute.backend \"ray\"); use engine native or trl");
  // trainer-job's verl worker is built in (job/verl_engine.h): never named as missing. Only what is missing is.
  EXPECT_EQ(missing.message().find("trainer-job"), std::string::npos) << missing.message();
  Status rollout_only = check_engine_capabilities(plan_of("grpo", "verl", kVerlSchedule),
                                                  EngineDeployment{.ray_backend = true, .gpu_rollout_engine = false});
  EXPECT_EQ(rollout_only.message(),
            "engine verl is not available on this deployment: it has verl 0.9.1 and the plan's translation into verl's "
            "configuration, and needs a GPU rollout engine (vLLM or SGLang on CUDA devices; this deployment has none); "
            "use engine native or trl");
  EXPECT_TRUE(check_engine_capabilities(plan_of("grpo", "verl", kVerlSchedule),
                                        EngineDeployment{.ray_backend = true, .gpu_rollout_engine = true})
                  .is_ok());
}

TEST(EngineCapabilities, EveryLimitBlamesAFieldOfThePlan) {
  for (const EngineLimit& limit : engine_limits()) {
    EXPECT_NE(find_field(limit.field), nullptr) << limit.field;
    EXPECT_NE(limit.engine, Engine::kNative) << limit.field;
  }
}

}  // namespace
}  // namespace trainer::plan
