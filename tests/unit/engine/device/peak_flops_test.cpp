// MFU's device table (src/engine/device/peak_flops.h): exact names, never substrings.
#include <gtest/gtest.h>

#include "engine/device/peak_flops.h"

namespace trainer::engine::device {
namespace {

TEST(PeakFlops, AnH20IsNotAnH100) {
  auto h20 = peak_flops("NVIDIA H20");
  auto h100 = peak_flops("NVIDIA H100 80GB HBM3");
  ASSERT_TRUE(h20 && h100);
  EXPECT_DOUBLE_EQ(h20->bf16, 148e12);
  EXPECT_DOUBLE_EQ(h100->bf16, 989.4e12);
}

TEST(PeakFlops, TheH100PcieHasItsOwnPeak) {
  auto pcie = peak_flops("NVIDIA H100 PCIe");
  ASSERT_TRUE(pcie);
  EXPECT_DOUBLE_EQ(pcie->bf16, 756.5e12);
  EXPECT_DOUBLE_EQ(pcie->fp32, 51.2e12);
}

TEST(PeakFlops, EveryA100NameNvmlGivesIsKnown) {
  for (const char* name : {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe"}) {
    auto peak = peak_flops(name);
    ASSERT_TRUE(peak) << name;
    EXPECT_DOUBLE_EQ(peak->bf16, 312e12) << name;
    EXPECT_DOUBLE_EQ(peak->fp32, 19.5e12) << name;
  }
}

TEST(PeakFlops, TheOtherRequiredDevicesAreKnown) {
  EXPECT_DOUBLE_EQ(peak_flops("NVIDIA H200")->bf16, 989.4e12);
  EXPECT_DOUBLE_EQ(peak_flops("NVIDIA L40S")->bf16, 362.05e12);
  EXPECT_DOUBLE_EQ(peak_flops("NVIDIA B200")->bf16, 2250e12);
}

TEST(PeakFlops, AnUnknownOrPartialNameHasNoPeak) {
  EXPECT_FALSE(peak_flops("NVIDIA GeForce RTX 4090"));
  EXPECT_FALSE(peak_flops("NVIDIA H2"));
  EXPECT_FALSE(peak_flops("NVIDIA H200 SXM 141GB X"));
  EXPECT_FALSE(peak_flops("H100"));
  EXPECT_FALSE(peak_flops(""));
  EXPECT_FALSE(peak_flops("cpu"));
}

TEST(PeakFlops, NamesAreNormalisedNotSearched) {
  EXPECT_EQ(normalise_device_name("  NVIDIA  A100-SXM4-80GB "), "a100 sxm4 80gb");
  EXPECT_EQ(normalise_device_name("nvidia h20"), "h20");
  EXPECT_TRUE(peak_flops("nvidia_h100_pcie"));
}

TEST(PeakFlops, EveryTableEntryIsNormalisedAndPositive) {
  for (const auto& entry : peak_flops_table()) {
    EXPECT_EQ(normalise_device_name(entry.name), entry.name);
    EXPECT_GT(entry.peak.bf16, entry.peak.fp32) << entry.name;
    EXPECT_GT(entry.peak.fp32, 0) << entry.name;
  }
}

TEST(TrainingFlops, SixPerLinearParameterPerToken) {
  EXPECT_DOUBLE_EQ(training_flops_per_token(1e9), 6e9);
}

}  // namespace
}  // namespace trainer::engine::device
