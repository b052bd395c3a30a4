// The CLI's formatting pieces: what users read must stay exactly this.
#include "cli/format.h"

#include <gtest/gtest.h>

namespace trainer::cli {
namespace {

TEST(CliDuration, ParsesGoDurations) {
  EXPECT_DOUBLE_EQ(*parse_duration("90s"), 90);
  EXPECT_DOUBLE_EQ(*parse_duration("15m0s"), 900);
  EXPECT_DOUBLE_EQ(*parse_duration("2h"), 7200);
  EXPECT_DOUBLE_EQ(*parse_duration("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(*parse_duration("1.5h"), 5400);
  EXPECT_DOUBLE_EQ(*parse_duration("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(*parse_duration("0"), 0);
}

TEST(CliDuration, RefusesWhatIsNotADuration) {
  EXPECT_FALSE(parse_duration(""));
  EXPECT_FALSE(parse_duration("90"));    // a bare number needs a unit
  EXPECT_FALSE(parse_duration("5x"));
  EXPECT_FALSE(parse_duration("m"));
  EXPECT_FALSE(parse_duration("1..5s"));
  EXPECT_FALSE(parse_duration("-5s"));
}

TEST(CliDuration, FormatsForPeople) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(45.4), "45s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(7440), "2h04m");
  EXPECT_EQ(format_duration(2 * 86400 + 3600 * 2), "2d02h");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(CliNumbers, ShortForColumns) {
  EXPECT_EQ(format_number(8), "8");
  EXPECT_EQ(format_number(1.23456), "1.235");
  EXPECT_EQ(format_number(0.0001), "0.0001");
  EXPECT_EQ(format_number(1.5e-05), "1.5e-05");
  EXPECT_EQ(format_number(12345), "12,345");
  EXPECT_EQ(format_thousands(1234567), "1,234,567");
  EXPECT_EQ(format_thousands(-1000), "-1,000");
  EXPECT_EQ(format_gpu_seconds(42), "42 GPU-s");
  EXPECT_EQ(format_gpu_seconds(750), "12.5 GPU-min");
  EXPECT_EQ(format_gpu_seconds(11520), "3.20 GPU-h");
  EXPECT_EQ(format_device_seconds(42, "CPU"), "42 CPU-s");
  EXPECT_EQ(format_device_seconds(11520, "CPU"), "3.20 CPU-h");
  EXPECT_EQ(format_device_time(nlohmann::json{{"CPU", 360.0}}), "6.0 CPU-min");
  EXPECT_EQ(format_device_time(nlohmann::json{{"CPU", 360.0}, {"GPU", 12.0}}), "6.0 CPU-min + 12 GPU-s");
  EXPECT_EQ(format_device_time(nlohmann::json::object()), "0 device-s");
}

TEST(CliTable, AlignsColumnsByDisplayWidth) {
  std::string table = render_table({"RUN", "PHASE", "LOSS"},
                                   {{"7d496e82c3a1", "TRAINING", "1.2"}, {"ab", "COMPLETED", ""}});
  EXPECT_EQ(table,
            "RUN           PHASE      LOSS\n"
            "7d496e82c3a1  TRAINING   1.2\n"
            "ab            COMPLETED\n");
}

TEST(CliTable, CountsUtf8AndColourCodesAsTheirVisibleWidth) {
  EXPECT_EQ(display_width("█░░"), 3u);
  EXPECT_EQ(display_width("\033[32mok\033[0m"), 2u);
  std::string table = render_table({"A", "B"}, {{"██", "x"}});
  EXPECT_EQ(table, "A   B\n██  x\n");
}

TEST(CliTable, TruncatesToDisplayCellsKeepingColourCodesWhole) {
  EXPECT_EQ(truncate_to_width("abcdef", 3), "abc");
  EXPECT_EQ(truncate_to_width("ab", 5), "ab");
  EXPECT_EQ(truncate_to_width("██░░", 3), "██░");
  EXPECT_EQ(truncate_to_width("\033[36mTRAINING\033[0m  x", 4), "\033[36mTRAI\033[0m");
  EXPECT_EQ(truncate_to_width("\033[36mab\033[0m", 2), "\033[36mab\033[0m");
}

TEST(CliFields, AlignValues) {
  EXPECT_EQ(render_fields({{"Run", "abc"}, {"Base model", "qwen"}}),
            "Run:         abc\n"
            "Base model:  qwen\n");
}

TEST(CliProgressBar, FillsInProportion) {
  EXPECT_EQ(progress_bar(5, 10, 10, false), "[#####.....]");
  EXPECT_EQ(progress_bar(0, 10, 4, false), "[....]");
  EXPECT_EQ(progress_bar(12, 10, 4, false), "[####]");
  EXPECT_EQ(progress_bar(3, 0, 4, false), "[....]");
  EXPECT_EQ(progress_bar(1, 2, 4, true), "██░░");
  EXPECT_EQ(progress_bar(1, 16, 4, true), "▎░░░");  // 1/16 of 4 cells = 2 eighths
  EXPECT_EQ(display_width(progress_bar(7, 9, 24, true)), 24u);
}

TEST(CliEta, ScalesElapsedTimeToTheStepsLeft) {
  EXPECT_DOUBLE_EQ(*estimate_remaining(25, 100, 50), 150);
  EXPECT_DOUBLE_EQ(*estimate_remaining(100, 100, 50), 0);
  EXPECT_FALSE(estimate_remaining(0, 100, 50));
  EXPECT_FALSE(estimate_remaining(10, 0, 50));
  EXPECT_FALSE(estimate_remaining(10, 100, 0));
}

TEST(CliYaml, RendersNestedDocumentsInOrder) {
  std::string yaml = to_yaml_text(nlohmann::json::parse(R"({"a":{"b":[1,2],"c":"x: y","d":null,"e":{}}})"));
  EXPECT_EQ(yaml,
            "a:\n"
            "  b:\n"
            "    - 1\n"
            "    - 2\n"
            "  c: \"x: y\"\n"
            "  d: null\n"
            "  e: {}\n");
  EXPECT_EQ(to_yaml_text(nlohmann::json::parse(R"({"s":"true","t":"plain text","n":1e-4})")),
            "n: 0.0001\ns: \"true\"\nt: plain text\n");
  EXPECT_EQ(to_yaml_text(nlohmann::json::parse(R"([{"a":1,"b":2}])")), "- a: 1\n  b: 2\n");
  EXPECT_EQ(to_yaml_text(nlohmann::json::parse(R"({"id":"53ffe62f","n":"1e5","t":"2026-11-30T05:45:13Z"})")),
            "id: 53ffe62f\nn: \"1e5\"\nt: 2026-11-30T05:45:13Z\n");
}

TEST(CliTime, ParsesRfc3339) {
  EXPECT_DOUBLE_EQ(*parse_rfc3339("1970-01-01T00:01:00Z"), 60);
  EXPECT_DOUBLE_EQ(*seconds_between("2026-11-30T05:28:45Z", "2026-11-30T05:30:00.5Z"), 75.5);
  EXPECT_DOUBLE_EQ(*parse_rfc3339("1970-01-01T01:00:00+01:00"), 0);
  EXPECT_DOUBLE_EQ(*parse_rfc3339("1970-01-01T00:01:00"), 60);  // no offset: UTC
  EXPECT_FALSE(parse_rfc3339("yesterday"));
  EXPECT_FALSE(parse_rfc3339("2026-02-30T00:00:00Z"));
}

}  // namespace
}  // namespace trainer::cli
