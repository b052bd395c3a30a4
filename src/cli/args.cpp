#include "cli/args.h"

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "common/spelling.h"

namespace trainer::cli {
namespace {

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

constexpr const char* kHelpCommand = "help";

const Command* find_child(const Command& parent, const std::string& word) {
  for (const auto& child : parent.children) {
    if (child.name == word) return &child;
    for (const auto& alias : child.aliases) {
      if (alias == word) return &child;
    }
  }
  return nullptr;
}

const Flag* find_flag(const std::vector<const std::vector<Flag>*>& sets, const std::string& name,
                      char short_name) {
  for (const auto* set : sets) {
    for (const auto& flag : *set) {
      if (!name.empty() && flag.name == name) return &flag;
      if (short_name && flag.short_name == short_name) return &flag;
    }
  }
  return nullptr;
}

std::string flag_column(const Flag& f) {
  std::string col = f.short_name ? std::string("-") + f.short_name + ", " : "    ";
  col += "--" + f.name;
  if (!f.value_name.empty()) col += " " + f.value_name;
  return col;
}

void append_flag_block(std::string& out, const std::string& title, const std::vector<Flag>& flags) {
  if (flags.empty()) return;
  out += "\n" + title + ":\n";
  size_t width = 0;
  for (const auto& f : flags) width = std::max(width, flag_column(f).size());
  for (const auto& f : flags) {
    std::string col = flag_column(f);
    std::string help = f.help;
    if (!f.requires_flag.empty()) help += " (needs --" + f.requires_flag + ")";
    out += "  " + col + std::string(width - col.size() + 3, ' ') + help + "\n";
  }
}

// The names (and aliases) a word could have meant among `parent`'s children.
std::vector<std::string> child_names(const Command& parent) {
  std::vector<std::string> names;
  for (const auto& c : parent.children) {
    names.push_back(c.name);
    for (const auto& a : c.aliases) names.push_back(a);
  }
  return names;
}

// " (did you mean X?)"-style suffix for a misspelt command word; the list of commands otherwise.
std::string unknown_command_hint(const Command& parent, const std::string& word, const std::string& parent_path) {
  std::vector<std::string> names;
  for (const auto& c : parent.children) names.push_back(c.name);
  if (auto near = nearest_name(word, child_names(parent))) {
    const Command* child = find_child(parent, *near);
    return " (did you mean `" + parent_path + " " + (child ? child->name : *near) + "`?)";
  }
  return " (commands: " + join(names, ", ") + ")";
}

}  // namespace

std::optional<std::string> Invocation::get(const std::string& flag) const {
  auto it = values.find(flag);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

std::string Invocation::get_or(const std::string& flag, const std::string& fallback) const {
  auto v = get(flag);
  return v ? *v : fallback;
}

std::string Invocation::command_line() const { return "trainer " + join(path, " "); }

const std::vector<Flag>& global_flags() {
  static const std::vector<Flag> kFlags = {
      {"trainer-url", 0, "URL", "address of trainerd (default: $TRAINER_URL, else http://localhost:9001)", ""},
      {"ca-file", 0, "FILE", "PEM CAs an https:// trainerd's certificate is verified with (default: $TRAINER_CA_FILE, "
       "else the system's CA store)", ""},
      {"output", 'o', "FORMAT", "output format: text (default), json, json-compact", ""},
      {"jq", 0, "EXPR", "filter the JSON answer with a jq program; strings print raw (implies -o json)", ""},
      {"json", 0, "FIELDS", "keep only these fields, of each item for a list (runId,phase); --json= lists them", ""},
      {"quiet", 'q', "", "waits print no progress, only their outcome", ""},
      {"timeout", 0, "DURATION", "bound each call to the service (30s, 2m; default 30s, 60s for changes)", ""},
      {"no-color", 0, "", "no colours and no redrawn progress line (as NO_COLOR does)", ""},
      {"help", 'h', "", "show help for this command", ""},
  };
  return kFlags;
}

std::string help_text(const Command& command, const std::vector<std::string>& path) {
  std::string name = join(path, " ");
  std::string out;
  out += command.summary + "\n";
  if (!command.description.empty()) out += "\n" + command.description + "\n";
  out += "\nUsage:\n  " + name;
  if (!command.children.empty()) {
    out += " COMMAND";
  }
  if (!command.args.empty()) out += " " + command.args;
  out += " [flags]\n";
  if (!command.aliases.empty()) out += "\nAliases: " + join(command.aliases, ", ") + "\n";
  if (!command.children.empty()) {
    out += "\nCommands:\n";
    size_t width = 0;
    for (const auto& c : command.children) width = std::max(width, c.name.size());
    for (const auto& c : command.children) {
      out += "  " + c.name + std::string(width - c.name.size() + 3, ' ') + c.summary + "\n";
    }
  }
  append_flag_block(out, "Flags", command.flags);
  // A command's own flag of the same name (a wait's --timeout) takes the place of the global one.
  std::vector<Flag> globals;
  for (const auto& g : global_flags()) {
    bool shadowed = false;
    for (const auto& f : command.flags) shadowed = shadowed || f.name == g.name;
    if (!shadowed) globals.push_back(g);
  }
  append_flag_block(out, "Global flags", globals);
  if (!command.examples.empty()) {
    out += "\nExamples:\n";
    for (size_t i = 0; i < command.examples.size(); ++i) {
      if (i) out += "\n";
      out += "  # " + command.examples[i].what + "\n  " + command.examples[i].line + "\n";
    }
  }
  if (!command.children.empty()) {
    out += "\nRun `" + name + " COMMAND --help` (or `trainer help " +
           (path.size() > 1 ? join(std::vector<std::string>(path.begin() + 1, path.end()), " ") + " " : "") +
           "COMMAND`) for a command's flags and examples.\n";
  }
  return out;
}

ParseResult parse_command_line(const Command& root, const std::vector<std::string>& argv) {
  ParseResult result;
  Invocation inv;
  const Command* cmd = &root;
  std::vector<std::string> help_path = {"trainer"};
  bool want_help = false;
  bool help_mode = false;  // `trainer help COMMAND [SUB]`: the words name the page to show
  bool only_positionals = false;

  auto usage_error = [&](const std::string& message) {
    result.invocation.reset();
    result.is_error = true;
    result.exit_code = kExitUsage;
    result.output = "trainer: " + message + "; see `" + join(help_path, " ") + " --help`";
    return result;
  };

  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (!only_positionals && arg == "--") {
      only_positionals = true;
      continue;
    }
    if (!only_positionals && arg.size() > 1 && arg[0] == '-' && arg != "-") {
      std::string name, value;
      bool has_value = false;
      char short_name = 0;
      if (arg.rfind("--", 0) == 0) {
        name = arg.substr(2);
        auto eq = name.find('=');
        if (eq != std::string::npos) {
          value = name.substr(eq + 1);
          name = name.substr(0, eq);
          has_value = true;
        }
      } else {
        short_name = arg[1];
        if (arg.size() > 2) {
          value = arg.substr(2);
          if (!value.empty() && value[0] == '=') value = value.substr(1);
          has_value = true;
        }
      }
      const Flag* flag = find_flag({&cmd->flags, &global_flags()}, name, short_name);
      if (!flag && help_mode) continue;
      if (!flag) {
        std::string hint;
        if (!name.empty()) {
          std::vector<std::string> names;
          for (const auto* set : {&cmd->flags, &global_flags()}) {
            for (const auto& f : *set) names.push_back(f.name);
          }
          if (auto near = nearest_name(name, names)) hint = " (did you mean --" + *near + "?)";
        }
        return usage_error("unknown flag " + arg + " for `" + join(help_path, " ") + "`" + hint);
      }
      if (flag->value_name.empty()) {
        if (has_value) return usage_error("flag --" + flag->name + " takes no value");
        inv.values[flag->name] = "";
      } else {
        if (!has_value) {
          if (i + 1 >= argv.size()) {
            return usage_error("flag --" + flag->name + " needs a value (" + flag->value_name + ")");
          }
          value = argv[++i];
        }
        inv.values[flag->name] = value;
        inv.repeated[flag->name].push_back(value);
      }
      if (flag->name == "help") want_help = true;
      continue;
    }
    // A word: a subcommand while the current command is a group, else a positional.
    if (!cmd->children.empty() && inv.positionals.empty()) {
      const Command* child = find_child(*cmd, arg);
      if (!child) {
        if (want_help && !help_mode) break;
        return usage_error("unknown command \"" + arg + "\" for `" + join(help_path, " ") + "`" +
                           unknown_command_hint(*cmd, arg, join(help_path, " ")));
      }
      if (cmd == &root && child->name == kHelpCommand && !help_mode) {
        help_mode = true;  // the next words name the page; stay at the root
        continue;
      }
      cmd = child;
      inv.path.push_back(child->name);
      help_path.push_back(child->name);
      continue;
    }
    if (help_mode) {
      return usage_error("`" + join(help_path, " ") + "` has no subcommand \"" + arg + "\"");
    }
    inv.positionals.push_back(arg);
  }

  if (help_mode && want_help && cmd == &root) {
    // `trainer help --help`: the page of `help` itself, as `trainer help help` shows it.
    cmd = find_child(root, kHelpCommand);
    help_path.push_back(kHelpCommand);
  }
  if (want_help || help_mode) {
    result.output = help_text(*cmd, help_path);
    result.exit_code = kExitOk;
    return result;
  }
  if (!cmd->run) {
    if (cmd == &root) {
      result.output = help_text(*cmd, help_path);
      result.exit_code = kExitOk;
      return result;
    }
    std::vector<std::string> names;
    for (const auto& c : cmd->children) names.push_back(c.name);
    return usage_error("`" + join(help_path, " ") + "` needs a command: " + join(names, ", "));
  }
  const int n = static_cast<int>(inv.positionals.size());
  if (n < cmd->min_args) {
    return usage_error("missing argument " + cmd->args);
  }
  if (cmd->max_args >= 0 && n > cmd->max_args) {
    return usage_error("unexpected argument \"" + inv.positionals[cmd->max_args] + "\"");
  }
  // A flag that only works with another one (the table says which; --help shows it).
  for (const auto* set : {&cmd->flags, &global_flags()}) {
    for (const auto& f : *set) {
      if (!f.requires_flag.empty() && inv.has(f.name) && !inv.has(f.requires_flag)) {
        return usage_error("--" + f.name + " needs --" + f.requires_flag);
      }
    }
  }
  inv.command = cmd;
  result.invocation = std::move(inv);
  return result;
}

}  // namespace trainer::cli
