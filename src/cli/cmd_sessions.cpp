// `trainer sessions create -f FILE --source oasst1|otel|canonical`: a raw conversation corpus,
// stored by the hash of its bytes, that a curation's judge turns into a dataset (docs/curations.md).
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

int sessions_create(Context& ctx) {
  auto file = ctx.inv.get("file");
  if (!file || file->empty()) {
    return ctx.fail("sessions create needs -f FILE (an OASST1, OTLP/JSON or canonical JSONL file)", kExitUsage);
  }
  if (*file == "-") {
    return ctx.fail("sessions create reads a file, not stdin: -f - is not accepted (save the corpus to a file)",
                    kExitUsage);
  }
  auto source = ctx.inv.get("source");
  if (!source || source->empty()) return ctx.fail("sessions create needs --source oasst1|otel|canonical", kExitUsage);
  std::string error;
  auto content = read_input(*file, &error);
  if (!content) return ctx.fail(error, kExitError);
  Response r;
  CallError e;
  if (!ctx.client.post("/v1/sessions", json{{"source", *source}, {"content", *content}}, &r, &e)) {
    return ctx.fail(describe_failure(e), e.transport ? kExitUnreachable : kExitError);
  }
  if (!ctx.text()) {
    ctx.print_json(r.body);
    return kExitOk;
  }
  std::string dropped;
  const json none = json::object();
  const json& reasons = r.body.contains("dropped") ? r.body["dropped"] : none;
  for (auto it = reasons.begin(); it != reasons.end(); ++it) {
    dropped += (dropped.empty() ? "" : ", ") + it.key() + ": " + it.value().dump();
  }
  std::fprintf(stderr, "%s %s session: %s candidates%s\n", r.http_status == 200 ? "Already stored:" : "Stored",
               str(r.body, "source").c_str(), str(r.body, "candidates").c_str(),
               dropped.empty() ? "" : (", dropped " + dropped).c_str());
  out(str(r.body, "hash") + "\n");
  return kExitOk;
}

}  // namespace

Command sessions_command() {
  Command g;
  g.name = "sessions";
  g.aliases = {"session"};
  g.summary = "Raw conversation corpora that curations judge into datasets";
  g.examples = {{"store an OASST1 tree file", "trainer sessions create -f trees.jsonl --source oasst1"}};
  Command create{"create", {}, "Store a conversation corpus and print its hash", "",
                 "Reads FILE as --source says and stores it under the hash of its bytes (the same file again\n"
                 "is the session already stored). Prints the hash on stdout (keep it: there is no list) and\n"
                 "on stderr how many candidate conversations it holds and how many were dropped, and why.\n"
                 "oasst1: OASST1 message trees, each assistant message a candidate with its path from the\n"
                 "root (deleted and non-English messages drop the candidates through them); otel: OTLP/JSON\n"
                 "logs exports, one per line, of the GenAI semantic conventions' events; canonical: captured\n"
                 "calls as chat rows, those with provenance.complete false dropped. A bad line is refused,\n"
                 "naming its line and field. Reads a file only (no stdin).",
                 {{"file", 'f', "FILE", "the corpus file (required; - is refused)", ""},
                  {"source", 0, "SOURCE", "oasst1, otel or canonical (required)", ""}},
                 {}, sessions_create, 0, 0, {}};
  create.examples = {{"an OTLP/JSON logs export", "trainer sessions create -f calls.otlp.jsonl --source otel"},
                     {"captured calls, the JSON answer with its counts", "trainer sessions create -f calls.jsonl --source canonical -o json"}};
  g.children = {create};
  return g;
}

}  // namespace trainer::cli
