// The engine's boundary helpers (src/engine/runtime.cpp): what libtorch it reports, where it
// trains, and how exceptions become a Status.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace trainer::engine {
namespace {

TEST(EngineRuntime, ReportsTheLinkedLibtorch) {
  RuntimeInfo info = runtime_info();
  EXPECT_EQ(info.torch_version, "2.11.0");
  EXPECT_GE(info.cpu_threads, 1);
}

TEST(EngineRuntime, AskingForNoGpuTrainsOnTheCpu) {
  EXPECT_TRUE(pick_device(0).is_cpu());
  if (!runtime_info().cuda_available) {
    EXPECT_TRUE(pick_device(1).is_cpu());
  }
}

TEST(EngineGuard, AnEngineErrorKeepsItsCodeAndMessage) {
  Status st = guard([] { throw EngineError(StatusCode::kInvalidArgument, "config.dataset: no rows"); }, "ignored");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "config.dataset: no rows");
}

TEST(EngineGuard, ALibtorchErrorBecomesAnInternalErrorWithItsContext) {
  Status st = guard([] { (void)at::ones({2}).view({3}); }, "model.safetensors");
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_EQ(st.message().rfind("model.safetensors: ", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("shape"), std::string::npos) << st.message();
}

TEST(EngineGuard, NothingThrownIsOk) { EXPECT_TRUE(guard([] {}, "x").is_ok()); }

}  // namespace
}  // namespace trainer::engine
