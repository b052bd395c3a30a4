// Reading sessions into candidate conversations (src/dataset/sessions.h).
#include "dataset/sessions.h"

#include <gtest/gtest.h>

namespace trainer::dataset {
namespace {

using json = nlohmann::json;

json msg(const std::string& role, const std::string& text, json replies = json::array(), json extra = json::object()) {
  json m = {{"role", role}, {"text", text}, {"lang", "en"}, {"deleted", false}, {"replies", replies}};
  m.update(extra);
  return m;
}

TEST(Oasst1Sessions, EveryAssistantMessageIsACandidateAlongItsPath) {
  // p1 -> {a1 -> p2 -> {a2, a3 (deleted)}, a4 (German)}
  json tree = {{"message_tree_id", "t1"},
               {"prompt", msg("prompter", "p1",
                              {msg("assistant", "a1", {msg("prompter", "p2", {msg("assistant", "a2"),
                                                                               msg("assistant", "a3", {}, {{"deleted", true}})})}),
                               msg("assistant", "a4", {}, {{"lang", "de"}})})}};
  SessionCandidates out = read_oasst1(tree.dump() + "\n\n" + tree.dump() + "\n");
  ASSERT_TRUE(out.status("file").is_ok()) << out.status("file").message();
  ASSERT_EQ(out.candidates.size(), 4u);  // a1 and a2, from each of the two lines
  EXPECT_EQ(out.candidates[0]["messages"],
            json::parse(R"([{"role":"user","content":"p1"},{"role":"assistant","content":"a1"}])"));
  EXPECT_EQ(out.candidates[1]["messages"].size(), 4u);
  EXPECT_EQ(out.candidates[1]["messages"][3]["content"], "a2");
  EXPECT_EQ(out.dropped.at("deleted"), 2);
  EXPECT_EQ(out.dropped.at("non_english"), 2);
}

TEST(Oasst1Sessions, ADeletedPrompterDropsEveryAnswerBelowIt) {
  json tree = {{"prompt", msg("prompter", "p1", {msg("assistant", "a1", {msg("prompter", "p2", {msg("assistant", "a2")}, {{"deleted", true}})})})}};
  SessionCandidates out = read_oasst1(tree.dump());
  ASSERT_EQ(out.candidates.size(), 1u);
  EXPECT_EQ(out.dropped.at("deleted"), 1);
}

TEST(Oasst1Sessions, BadLinesAreNamedByLineAndField) {
  json good = {{"prompt", msg("prompter", "p", {msg("assistant", "a")})}};
  json bad_role = {{"prompt", msg("prompter", "p", {msg("prompter", "again")})}};
  json no_text = {{"prompt", {{"role", "prompter"}}}};
  SessionCandidates out = read_oasst1(good.dump() + "\n" + bad_role.dump() + "\n{oops\n" + no_text.dump() + "\n");
  Status st = out.status("file");
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.field(), "file");
  EXPECT_NE(st.message().find("line 2: prompt.replies[0].role: "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("line 3, column"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("line 4: prompt.text: "), std::string::npos) << st.message();
  EXPECT_EQ(out.candidates.size(), 1u);  // the good line's; the bad lines add none
}

json any_string(const std::string& s) { return {{"stringValue", s}}; }
json kv(const std::string& k, json v) { return {{"key", k}, {"value", v}}; }

json record(const std::string& event, const std::string& trace, json body) {
  return {{"timeUnixNano", "1"},
          {"attributes", json::array({kv("event.name", any_string(event)), kv("gen_ai.system", any_string("openai"))})},
          {"traceId", trace},
          {"spanId", "00f067aa0ba902b7"},
          {"body", body}};
}

json content(const std::string& text) { return {{"kvlistValue", {{"values", json::array({kv("content", any_string(text))})}}}}; }

json choice(const std::string& text, int index = 0) {
  json message = {{"kvlistValue", {{"values", json::array({kv("role", any_string("assistant")), kv("content", any_string(text))})}}}};
  return {{"kvlistValue", {{"values", json::array({kv("index", {{"intValue", std::to_string(index)}}), kv("message", message)})}}}};
}

std::string batch(json records) {
  return json{{"resourceLogs", json::array({{{"scopeLogs", json::array({{{"logRecords", records}}})}}})}}.dump();
}

TEST(OtelSessions, EventsGroupIntoCallsByTraceAndSpanAcrossBatches) {
  const std::string t1 = "4bf92f3577b34da6a3ce929d0e0e4736", t2 = "5bf92f3577b34da6a3ce929d0e0e4736";
  std::string text = batch(json::array({record("gen_ai.system.message", t1, content("Be brief.")),
                                        record("gen_ai.user.message", t1, content("Hi")),
                                        record("gen_ai.user.message", t2, content("Bye"))})) +
                     "\n" +
                     batch(json::array({record("gen_ai.choice", t1, choice("Hello")),
                                        record("gen_ai.choice", t1, choice("Hey", 1)),
                                        {{"body", any_string("a plain log line")}, {"traceId", t1}, {"spanId", "00f067aa0ba902b7"}}})) +
                     "\n";
  SessionCandidates out = read_otel(text);
  ASSERT_EQ(out.lines.bad_lines, 0) << out.status("file").message();
  ASSERT_EQ(out.candidates.size(), 1u);
  EXPECT_EQ(out.candidates[0]["messages"],
            json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}])"));
  EXPECT_EQ(out.dropped.at("no_choice"), 1);      // t2 never got an answer
  EXPECT_EQ(out.dropped.at("other_choices"), 1);  // choice 1 of t1
  EXPECT_EQ(out.dropped.at("not_gen_ai"), 1);
}

TEST(OtelSessions, ABadRecordNamesItsPathAndItsLineAddsNothing) {
  json bad = record("gen_ai.user.message", "ab", {{"kvlistValue", {{"values", json::array({kv("content", {{"intValue", "x"}})})}}}});
  SessionCandidates out = read_otel(batch(json::array({bad})) + "\n{\"resource\": 1}\n");
  Status st = out.status("file");
  EXPECT_NE(st.message().find("line 1: resourceLogs[0].scopeLogs[0].logRecords[0].body.kvlistValue.values[0].value.intValue: "),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("line 2: resourceLogs: missing"), std::string::npos) << st.message();
}

TEST(CanonicalSessions, IncompleteProvenanceIsDroppedAndBadRowsNamed) {
  const std::string text =
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],"provenance":{"complete":true}})"
      "\n"
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],"provenance":{"complete":false}})"
      "\n"
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]})"
      "\n"
      R"({"messages":[{"role":"robot","content":"q"}]})"
      "\n"
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],"provenance":{"complete":"no"}})"
      "\n";
  SessionCandidates out = read_canonical(text);
  EXPECT_EQ(out.candidates.size(), 2u);
  EXPECT_EQ(out.dropped.at("incomplete_provenance"), 1);
  Status st = out.status("file");
  EXPECT_NE(st.message().find("line 4: messages[0].role: "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("line 5: provenance.complete: "), std::string::npos) << st.message();
}

TEST(Sessions, AFileWithoutCandidatesSaysWhatWasDropped) {
  SessionCandidates out = read_canonical(
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],"provenance":{"complete":false}})");
  Status st = out.status("file");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("no candidate conversation (dropped: incomplete_provenance: 1)"), std::string::npos)
      << st.message();
  EXPECT_EQ(session_source("otel"), SessionSource::kOtel);
  EXPECT_FALSE(session_source("sharegpt").has_value());
}

}  // namespace
}  // namespace trainer::dataset
