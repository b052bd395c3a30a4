#include "plan/plan.h"
#include "plan/plan_errors.h"
#include "plan/document.h"
#include "plan/object_reader.h"


#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <cassert>

#include "common/json_parse.h"
#include "plan/bounds.h"
#include "plan/reward_terms.h"
#include "common/spelling.h"

namespace trainer::plan {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kKnownModules = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                "gate_proj", "up_proj", "down_proj"};

constexpr std::pair<const char*, Method> kMethods[] = {
    {"sft", Method::kSft}, {"grpo", Method::kGrpo}, {"gspo", Method::kGspo}};
constexpr std::pair<const char*, Engine> kEngines[] = {
    {"native", Engine::kNative}, {"trl", Engine::kTrl}, {"verl", Engine::kVerl}};
constexpr std::pair<const char*, Precision> kPrecisions[] = {{"BF16", Precision::kBf16}, {"FP32", Precision::kFp32}};
constexpr std::pair<const char*, Schedule> kSchedules[] = {
    {"linear", Schedule::kLinear}, {"cosine", Schedule::kCosine}, {"constant", Schedule::kConstant}};
constexpr std::pair<const char*, LossAggregation> kAggregations[] = {{"dapo", LossAggregation::kDapo},
                                                                     {"bnpo", LossAggregation::kBnpo},
                                                                     {"grpo", LossAggregation::kGrpo},
                                                                     {"dr_grpo", LossAggregation::kDrGrpo}};
constexpr std::pair<const char*, ScaleRewards> kScaleRewards[] = {
    {"group", ScaleRewards::kGroup}, {"batch", ScaleRewards::kBatch}, {"none", ScaleRewards::kNone}};
// Bounds of rlHyperparams.stopStrings (each is looked for after every sampled token).
constexpr size_t kMaxStopStrings = 32;
constexpr size_t kMaxStopStringBytes = 256;
// The config's value at `path` (dotted, below "config."); nullptr when it is not written.
const json* config_value(const json& config, std::string_view path) {
  const json* at = &config;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    const std::string key(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
    if (dot == std::string_view::npos) return at;
    start = dot + 1;
  }
}

Status read_lora(Problems& p, const json& obj, const std::string& path, LoraSettings* lora) {
  ObjectReader r(p, obj, path);
  p.keep(r.read_int_as("rank", &lora->rank));
  p.keep(r.read_double("alpha", &lora->alpha));
  p.keep(r.read_double("dropout", &lora->dropout));
  if (const json* mods = r.find("targetModules")) {
    if (!mods->is_array() || mods->empty()) {
      return r.fail("targetModules", "must be a non-empty list of module names, got " + mods->dump());
    }
    lora->targetModules.clear();
    for (const json& m : *mods) {
      if (!m.is_string() ||
          std::find(kKnownModules.begin(), kKnownModules.end(), m.get<std::string>()) == kKnownModules.end()) {
        std::string hint;
        if (m.is_string()) {
          if (auto near = nearest_name(m.get<std::string>(), kKnownModules)) hint = " (did you mean " + *near + "?)";
        }
        return r.fail("targetModules", "unknown module " + m.dump() + hint +
                                           "; choose among q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
      }
      if (std::find(lora->targetModules.begin(), lora->targetModules.end(), m.get<std::string>()) ==
          lora->targetModules.end()) {
        lora->targetModules.push_back(m.get<std::string>());
      }
    }
  }
  r.refuse_unknown();
  return Status::ok();
}

Status read_optimizer(Problems& p, const json& obj, const std::string& path, OptimizerSettings* opt) {
  ObjectReader r(p, obj, path);
  p.keep(r.read_double("learningRate", &opt->learningRate));
  p.keep(r.read_double("weightDecay", &opt->weightDecay));
  p.keep(r.read_double("beta1", &opt->beta1));
  p.keep(r.read_double("beta2", &opt->beta2));
  p.keep(r.read_double("epsilon", &opt->epsilon));
  p.keep(r.read_double("maxGradNorm", &opt->maxGradNorm));
  p.keep(read_enum(r, "schedule", kSchedules, false, &opt->schedule));
  p.keep(r.read_int_as("warmupSteps", &opt->warmupSteps));
  p.keep(r.read_double("warmupRatio", &opt->warmupRatio));
  r.refuse_unknown();
  return Status::ok();
}

Status read_training(Problems& p, const json& obj, const std::string& path, TrainingSettings* t) {
  ObjectReader r(p, obj, path);
  p.keep(r.read_int_as("epochs", &t->epochs));
  p.keep(r.read_optional_int("maxSteps", &t->maxSteps));
  p.keep(r.read_int_as("batchSize", &t->batchSize));
  p.keep(r.read_int_as("gradientAccumulation", &t->gradientAccumulation));
  p.keep(r.read_int_as("validationFrequencySteps", &t->validationFrequencySteps));
  p.keep(r.read_double("validationSplit", &t->validationSplit));
  p.keep(r.read_bool("packing", &t->packing));
  p.keep(r.read_int_as("seed", &t->seed));
  r.refuse_unknown();
  return Status::ok();
}

Status read_judge(Problems& p, const json& obj, const std::string& at, JudgeEndpoint* judge) {
  // Not in the field table: trainerd writes it into the job's plan (docs/graders.md).
  ObjectReader r(p, obj, at);
  p.keep(r.read_string("url", &judge->url, /*required=*/true));
  p.keep(r.read_string("model", &judge->model, false));
  p.keep(r.read_string("apiKeyEnv", &judge->apiKeyEnv, false));
  p.keep(r.read_string("caFile", &judge->caFile, false));
  p.keep(r.read_string("jobIdEnv", &judge->jobIdEnv, false));
  p.keep(r.read_string("proxy", &judge->proxy, false));
  r.refuse_unknown();
  return Status::ok();
}

// `network: {allow: ["HOST:PORT", ...]}` of a term or the tools (config...network.allow): what
// the confined code may connect to. The form is checked here; whether trainerd's outbound.allow
// lets it is checked at submission (service/judges.cpp).
Status read_network(Problems& p, ObjectReader& r, std::vector<std::string>* allow) {
  const json* n = r.find("network");
  if (n == nullptr || n->is_null()) return Status::ok();
  constexpr const char* kShape = "must be an object {allow: [\"HOST:PORT\", ...]}, got ";
  if (!n->is_object()) return r.fail("network", kShape + n->dump());
  ObjectReader nr(p, *n, r.field_path("network"));
  const json* list = nr.find("allow");
  if (list == nullptr || !list->is_array() || list->empty()) {
    p.keep(nr.fail("allow", "must be a non-empty list of \"HOST:PORT\" the code connects to, got " +
                                (list == nullptr ? std::string("nothing") : list->dump())));
  } else {
    for (size_t i = 0; i < list->size(); ++i) {
      const json& e = (*list)[i];
      const std::string text = e.is_string() ? e.get<std::string>() : "";
      const size_t colon = text.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() ||
          text.find_first_of(" /@") != std::string::npos) {
        p.keep(nr.fail("allow[" + std::to_string(i) + "]", "must be \"HOST:PORT\" (e.g. \"api.example.com:443\"), got " +
                                                               e.dump()));
        continue;
      }
      allow->push_back(text);
    }
  }
  nr.refuse_unknown();
  return Status::ok();
}

Status read_term(Problems& p, const json& t, const std::string& at, RewardTermSpec* spec) {
  if (!t.is_object()) return invalid_field(at, "must be an object {kind, weight}, got " + t.dump());
  ObjectReader r(p, t, at, "config.reward.terms[]");
  // A term of no known kind cannot be read further: which fields it takes depends on its kind.
  TRAINER_RETURN_IF_ERROR(r.read_string("kind", &spec->kind, /*required=*/true));
  TRAINER_RETURN_IF_ERROR(check_term_kind(at, spec->kind));
  const TermKind kind = *term_kind(spec->kind);
  if (const json* w = r.find("weight")) {
    if (!w->is_number() || !std::isfinite(w->get<double>())) p.keep(r.fail("weight", "must be a number, got " + w->dump()));
    else spec->weight = w->get<double>();
  }
  if (const json* n = r.find("name")) {
    if (!n->is_string() || n->get<std::string>().empty()) p.keep(r.fail("name", "must be a non-empty string, got " + n->dump()));
    else spec->name = n->get<std::string>();
  }
  // Fields that only some kinds take are refused, by name, on the others.
  auto only = [&](const char* key, bool applies, const char* kinds) -> Status {
    if (applies || !t.contains(key)) return Status::ok();
    return r.fail(key, std::string("applies to ") + kinds + " terms, and this term is " + spec->kind);
  };
  const bool external = kind != TermKind::kLabelMatch;
  const bool remote = kind == TermKind::kHttp || kind == TermKind::kModel;
  p.keep(only("timeoutSeconds", external, "rule, bundle, http and model"));
  p.keep(only("maxConsecutiveFailures", external, "rule, bundle, http and model"));
  p.keep(only("retries", remote, "http and model"));
  p.keep(only("concurrency", remote, "http and model"));
  p.keep(only("graderInstructions", kind == TermKind::kModel, "model"));
  p.keep(only("judge", kind == TermKind::kModel, "model"));
  p.keep(only("maxTokens", kind == TermKind::kModel, "model"));
  p.keep(only("caFile", kind == TermKind::kHttp, "http (a judge's CA file is declared with the judge)"));
  p.keep(only("network", kind == TermKind::kRule || kind == TermKind::kBundle,
              "rule and bundle (an http or model term's calls are trainerd's outbound.allow's)"));
  p.keep(read_network(p, r, &spec->networkAllow));
  p.keep(r.read_double("timeoutSeconds", &spec->timeoutSeconds));
  p.keep(r.read_int_as("maxConsecutiveFailures", &spec->maxConsecutiveFailures));
  p.keep(r.read_int_as("retries", &spec->retries));
  p.keep(r.read_int_as("concurrency", &spec->concurrency));
  p.keep(r.read_int_as("maxTokens", &spec->maxTokens));
  p.keep(r.read_optional_string("graderInstructions", &spec->graderInstructions));
  if (spec->graderInstructions && spec->graderInstructions->empty()) {
    p.keep(r.fail("graderInstructions", "must not be empty; leave it out for the built-in instructions"));
  }
  p.keep(r.read_optional_string("caFile", &spec->caFile));
  if (spec->caFile && spec->caFile->empty()) {
    p.keep(r.fail("caFile", "must not be empty; leave it out to trust the system's CA store"));
  }
  if (const json* j = r.find("judge")) {
    if (!j->is_object()) {
      p.keep(r.fail("judge", "must be an object {url, model, apiKeyEnv, caFile}, got " + j->dump()));
    } else {
      spec->judge.emplace();
      p.keep(read_judge(p, *j, at + ".judge", &*spec->judge));
    }
  }
  r.refuse_unknown();
  return Status::ok();
}

Status read_reward(Problems& p, const json& obj, std::vector<RewardTermSpec>* terms) {
  ObjectReader r(p, obj, "config.reward");
  if (const json* list = r.find("terms")) {
    if (!list->is_array() || list->empty()) {
      return r.fail("terms", "must be a non-empty list of {kind, weight}, got " + list->dump());
    }
    terms->clear();
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string at = "config.reward.terms[" + std::to_string(i) + "]";
      RewardTermSpec spec;
      if (Status st = read_term(p, (*list)[i], at, &spec); !st.is_ok()) {
        p.keep(std::move(st));
        continue;
      }
      bool repeated = false;
      for (const auto& other : *terms) {
        const std::string a = term_label(other), b = term_label(spec);
        if (a == b && !repeated) {
          p.keep(invalid_field(at + ".name", "two terms are named \"" + a + "\"; give each a distinct name"));
          repeated = true;
        }
      }
      terms->push_back(std::move(spec));
    }
  }
  r.refuse_unknown();
  return Status::ok();
}

Status read_rl(Problems& p, const json& obj, RlSettings* rl) {
  ObjectReader r(p, obj, "config.rlHyperparams");
  p.keep(r.read_int_as("groupSize", &rl->groupSize));
  p.keep(r.read_int_as("promptsPerStep", &rl->promptsPerStep));
  p.keep(r.read_int_as("maxCompletionLength", &rl->maxCompletionLength));
  p.keep(r.read_double("temperature", &rl->temperature));
  p.keep(r.read_double("topP", &rl->topP));
  p.keep(r.read_int_as("topK", &rl->topK));
  p.keep(r.read_double("clipLow", &rl->clipLow));
  p.keep(r.read_double("clipHigh", &rl->clipHigh));
  p.keep(r.read_int_as("iterationsPerBatch", &rl->iterationsPerBatch));
  p.keep(read_enum(r, "lossAggregation", kAggregations, false, &rl->lossAggregation));
  p.keep(read_enum(r, "scaleRewards", kScaleRewards, false, &rl->scaleRewards));
  p.keep(r.read_int_as("microBatchSize", &rl->microBatchSize));
  if (const json* stops = r.find("stopStrings")) {
    if (!stops->is_array() || stops->size() > kMaxStopStrings) {
      return r.fail("stopStrings", "must be a list of at most " + std::to_string(kMaxStopStrings) +
                                       " strings, got " + stops->dump());
    }
    rl->stopStrings.clear();
    for (size_t i = 0; i < stops->size(); ++i) {
      const json& s = (*stops)[i];
      if (!s.is_string() || s.get<std::string>().empty() || s.get<std::string>().size() > kMaxStopStringBytes) {
        p.keep(invalid_field("config.rlHyperparams.stopStrings[" + std::to_string(i) + "]",
                             "must be a non-empty string of at most " + std::to_string(kMaxStopStringBytes) +
                                 " bytes, got " + s.dump()));
        continue;
      }
      rl->stopStrings.push_back(s.get<std::string>());
    }
  }
  if (const json* tools = r.find("tools"); tools && !tools->is_null()) {
    if (!tools->is_object()) return r.fail("tools", "must be an object {command, timeoutSeconds, maxCalls, network}, got " + tools->dump());
    ObjectReader t(p, *tools, "config.rlHyperparams.tools");
    ToolSettings ts;
    p.keep(t.read_string("command", &ts.command, true));
    p.keep(t.read_double("timeoutSeconds", &ts.timeoutSeconds));
    p.keep(t.read_int_as("maxCalls", &ts.maxCalls));
    p.keep(read_network(p, t, &ts.networkAllow));
    t.refuse_unknown();
    rl->tools = std::move(ts);
  }
  const json* sub = nullptr;
  p.keep(r.read_object("optimizer", &sub));
  p.keep(read_optimizer(p, *sub, "config.rlHyperparams.optimizer", &rl->optimizer));
  r.refuse_unknown();
  return Status::ok();
}

Status read_config(Problems& p, const json& obj, RunConfig* c) {
  ObjectReader r(p, obj, "config");
  p.keep(r.read_string("dataset", &c->dataset, /*required=*/true));
  Status method_read = read_enum(r, "method", kMethods, false, &c->method);
  const bool method_known = method_read.is_ok();
  p.keep(std::move(method_read));
  p.keep(read_enum(r, "engine", kEngines, false, &c->engine));
  const bool rl = c->is_rl();
  const std::string method = std::string("\"") + method_name(c->method) + "\"";
  // Fields that belong to the other kind of method are refused as such (and not again as unknown),
  // by the one list of them (method_only_fields()). With a method that is itself wrong, which
  // kind they belong to is not known: neither is refused.
  for (const MethodField& f : method_only_fields()) {
    const std::string_view below = f.path.substr(std::string_view("config.").size());
    const bool top = below.find('.') == std::string_view::npos;
    if (!method_known) {
      if (f.rl && top) r.find(std::string(below));
      continue;
    }
    if (f.rl == rl || config_value(obj, below) == nullptr) continue;
    if (top) r.find(std::string(below));
    p.keep(invalid_field(std::string(f.path),
                         f.rl ? std::string("a reinforcement-learning field: it applies when config.method is "
                                            "\"grpo\" or \"gspo\", and this plan's method is \"sft\"")
                              : "an SFT field: a " + method + " run " + std::string(f.instead)));
  }
  if (!rl) p.keep(r.read_optional_string("validationDataset", &c->validationDataset));
  const json* hp = nullptr;
  p.keep(r.read_object("hyperparams", &hp));
  {
    ObjectReader h(p, *hp, "config.hyperparams");
    const json* sub = nullptr;
    p.keep(h.read_object("lora", &sub));
    p.keep(read_lora(p, *sub, "config.hyperparams.lora", &c->lora));
    p.keep(h.read_object("optimizer", &sub));
    p.keep(read_optimizer(p, *sub, "config.hyperparams.optimizer", &c->optimizer));
    p.keep(h.read_object("training", &sub));
    p.keep(read_training(p, *sub, "config.hyperparams.training", &c->training));
    h.refuse_unknown();
  }
  p.keep(r.read_int_as("maxSeqLength", &c->maxSeqLength));
  const json* model = nullptr;
  p.keep(r.read_object("model", &model));
  {
    ObjectReader m(p, *model, "config.model");
    p.keep(read_enum(m, "precision", kPrecisions, true, &c->precision));
    m.refuse_unknown();
  }
  if (rl) {
    const json* sub = nullptr;
    p.keep(r.read_object("reward", &sub));
    p.keep(read_reward(p, *sub, &c->rewardTerms));
    p.keep(r.read_double("klBeta", &c->klBeta));
    p.keep(r.read_object("rlHyperparams", &sub));
    p.keep(read_rl(p, *sub, &c->rl));
    if (c->rl.maxCompletionLength >= c->maxSeqLength) {
      p.keep(invalid_field("config.rlHyperparams.maxCompletionLength",
                           "must be below config.maxSeqLength (" + std::to_string(c->maxSeqLength) +
                               "), which also holds the prompt; got " + std::to_string(c->rl.maxCompletionLength)));
    }
  }
  r.refuse_unknown();
  return Status::ok();
}

Status read_execution(Problems& p, const json& obj, ExecutionSettings* e) {
  ObjectReader r(p, obj, "execution");
  p.keep(r.read_int_as("gpus", &e->gpus));
  p.keep(r.read_optional_int("saveEvery", &e->saveEvery));
  p.keep(r.read_int_as("keepAdapters", &e->keepAdapters));
  p.keep(r.read_int_as("keepTrainingStates", &e->keepTrainingStates));
  p.keep(r.read_int_as("maxAttempts", &e->maxAttempts));
  p.keep(r.read_optional_int("resumableSaveEvery", &e->resumableSaveEvery));
  double minutes = std::numeric_limits<double>::quiet_NaN();  // stays NaN when absent, null or refused
  p.keep(r.read_double("resumableSaveMinutes", &minutes));
  if (!std::isnan(minutes)) e->resumableSaveMinutes = minutes;
  r.refuse_unknown();
  return Status::ok();
}

// The plan's top-level graderInstructions go to its model: terms that have none of their own; a
// plan with no model: term and no model: grader has no judge to give them to.
Status apply_grader_instructions(Plan* plan) {
  if (!plan->graderInstructions) return Status::ok();
  if (plan->graderInstructions->empty()) {
    return invalid_field("graderInstructions", "must not be empty; leave it out for the judges' own or built-in instructions");
  }
  bool judged = plan->grader && term_kind(*plan->grader) == TermKind::kModel;
  for (RewardTermSpec& t : plan->config.rewardTerms) {
    if (term_kind(t.kind) != TermKind::kModel) continue;
    judged = true;
    if (!t.graderInstructions) t.planGraderInstructions = plan->graderInstructions;
  }
  if (!judged) {
    return invalid_field("graderInstructions",
                         "applies to model: graders (judges) only; this plan has no model: reward term and " +
                             (plan->grader ? "its grader is " + *plan->grader
                                           : std::string("names no grader (write grader: model:NAME for a judge of its evaluations)")));
  }
  return Status::ok();
}

}  // namespace

std::optional<Method> method_from_name(std::string_view name) {
  for (const auto& [n, value] : kMethods) {
    if (name == n) return value;
  }
  return std::nullopt;
}

std::optional<Engine> engine_from_name(std::string_view name) {
  for (const auto& [n, value] : kEngines) {
    if (name == n) return value;
  }
  return std::nullopt;
}

const char* engine_name(Engine e) {
  for (const auto& [name, value] : kEngines) {
    if (value == e) return name;
  }
  return "native";
}

const char* loss_aggregation_name(LossAggregation a) {
  for (const auto& [name, value] : kAggregations) {
    if (value == a) return name;
  }
  return "dapo";
}

const char* scale_rewards_name(ScaleRewards s) {
  for (const auto& [name, value] : kScaleRewards) {
    if (value == s) return name;
  }
  return "group";
}

Result<RewardTermSpec> parse_reward_term(const json& term, const std::string& at) {
  Problems p;
  RewardTermSpec spec;
  p.keep(read_term(p, term, at, &spec));
  if (!p.empty()) return p.list().front();
  return spec;
}

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "BF16" : "FP32"; }

Result<Plan> plan_from_json(const nlohmann::json& doc, std::string_view source, std::vector<Status>* errors) {
  if (!doc.is_object()) {
    Status st = invalid_argument(std::string(source) + ": a plan must be an object with kind: run, got " + doc.dump());
    if (errors) errors->assign(1, st);
    return st;
  }
  Problems p;
  Plan plan;
  ObjectReader r(p, doc, "");
  p.keep(r.read_string("kind", &plan.kind, true));
  if (!plan.kind.empty() && plan.kind != "run") p.keep(invalid_field("kind", "must be \"run\", got \"" + plan.kind + "\""));
  p.keep(r.read_string("workload", &plan.workload, true));
  p.keep(r.read_optional_string("baseModel", &plan.baseModel));
  const json* obj = nullptr;
  p.keep(r.read_object("config", &obj));
  if (obj->empty()) {
    if (!doc.contains("config") || doc["config"].is_null()) p.keep(invalid_field("config", "required field is missing"));
  } else {
    p.keep(read_config(p, *obj, &plan.config));
  }
  p.keep(r.read_object("execution", &obj));
  p.keep(read_execution(p, *obj, &plan.execution));
  p.keep(r.read_optional_string("grader", &plan.grader));
  p.keep(r.read_optional_string("graderInstructions", &plan.graderInstructions));
  p.keep(apply_grader_instructions(&plan));
  p.keep(r.read_optional_string("description", &plan.description));
  p.keep(r.read_optional_string("configName", &plan.configName));
  p.keep(r.read_optional_string("submissionId", &plan.submissionId));
  p.keep(r.read_optional_int("pauseAtStep", &plan.pauseAtStep));
  p.keep(r.read_optional_string("warmStartModelId", &plan.warmStartModelId));
  p.keep(r.read_optional_string("modelName", &plan.modelName));
  if (plan.modelName && (plan.modelName->empty() || plan.modelName->size() > 200)) {
    p.keep(invalid_field("modelName", "must be 1 to 200 characters, got " + std::to_string(plan.modelName->size())));
  }
  if (const json* smoke = r.find("smoke"); smoke && !smoke->is_null()) {
    if (smoke->is_boolean()) {
      if (smoke->get<bool>()) plan.smoke = SmokeSettings{};
    } else if (!smoke->is_object()) {
      p.keep(invalid_field("smoke", "must be an object {steps, rows} or true, got " + smoke->dump()));
    } else {
      ObjectReader s(p, *smoke, "smoke");
      SmokeSettings settings;
      p.keep(s.read_int_as("steps", &settings.steps));
      p.keep(s.read_int_as("rows", &settings.rows));
      s.refuse_unknown();
      plan.smoke = settings;
    }
  }
  p.keep(r.read_object("source", &obj));
  if (!obj->empty()) {
    ObjectReader source(p, *obj, "source");
    std::optional<std::string> model;
    p.keep(source.read_optional_string("model", &model));
    source.refuse_unknown();
    if (model && plan.warmStartModelId && *model != *plan.warmStartModelId) {
      p.keep(invalid_field("source.model", "names model '" + *model + "', but warmStartModelId names '" +
                                               *plan.warmStartModelId + "'; give one of the two"));
    } else if (model) {
      plan.warmStartModelId = model;
    }
  }
  const auto& max_steps = plan.config.training.maxSteps;
  if (plan.pauseAtStep && max_steps && *plan.pauseAtStep >= *max_steps) {
    p.keep(invalid_field("pauseAtStep", "must be less than config.hyperparams.training.maxSteps (" +
                                            std::to_string(*max_steps) + "), got " + std::to_string(*plan.pauseAtStep) +
                                            ": a run at its last step completes rather than pausing"));
  }
  r.refuse_unknown();
  if (p.empty()) return plan;
  Status first = p.list().front();
  if (errors) *errors = std::move(p.list());
  return first;
}

Result<Plan> plan_from_json(const nlohmann::json& doc, std::string_view source) {
  return plan_from_json(doc, source, nullptr);
}

Result<Plan> parse_plan(std::string_view text, std::string_view source, std::vector<Status>* errors) {
  auto fail = [&](Status st) -> Result<Plan> {
    if (errors) errors->assign(1, st);
    return st;
  };
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return fail(invalid_argument(std::string(source) + ": the plan is empty"));
  }
  auto doc = parse_document(text, source);
  if (!doc.is_ok()) return fail(doc.status());
  return plan_from_json(*doc, source, errors);
}

Result<Plan> parse_plan(std::string_view text, std::string_view source) { return parse_plan(text, source, nullptr); }


int64_t total_steps(const RunConfig& config, int64_t rows) {
  if (config.training.maxSteps) return *config.training.maxSteps;
  if (rows <= 0) return 0;
  if (config.is_rl()) {
    const int64_t batches = (rows + config.rl.promptsPerStep - 1) / config.rl.promptsPerStep;
    return batches * config.training.epochs * config.rl.iterationsPerBatch;
  }
  int64_t batches = (rows + config.training.batchSize - 1) / config.training.batchSize;
  int64_t per_epoch = (batches + config.training.gradientAccumulation - 1) / config.training.gradientAccumulation;
  return per_epoch * config.training.epochs;
}

}  // namespace trainer::plan
