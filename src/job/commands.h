// The subcommands of trainer-job. Each takes the arguments after its name and returns the
// process exit code (0 ok, 1 failure, 2 usage error).
#pragma once

namespace trainer::job {

int cmd_run(int argc, char** argv);       // run --plan FILE --output DIR [--events FILE]
int cmd_score(int argc, char** argv);     // score --model DIR [--adapter DIR] --data FILE.jsonl
int cmd_evaluate(int argc, char** argv);  // evaluate --spec FILE.json --output DIR
int cmd_tokenize(int argc, char** argv);  // tokenize --tokenizer DIR  (text on stdin -> JSON ids)
int cmd_analyze(int argc, char** argv);   // analyze --model DIR --data FILE.jsonl [--max-seq-length N]
int cmd_serve(int argc, char** argv);
int cmd_merge(int argc, char** argv);     // merge --model DIR --adapter DIR --output DIR     // serve --model DIR [--adapter NAME=DIR]... [--port N]
int cmd_scan(int argc, char** argv);      // scan --data DIR  (a read-only look at this node, JSON)
// Hidden test hook: one forward/backward pass on given ids, dumped as safetensors.
int cmd_debug_forward(int argc, char** argv);
int cmd_debug_generate(int argc, char** argv);
int cmd_debug_rl_loss(int argc, char** argv);

}  // namespace trainer::job
