#include "job/args.h"

namespace trainer::job {

Args parse_args(int argc, char** argv, const std::set<std::string>& with_value, const std::set<std::string>& flag_names) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      a.error = "unexpected argument '" + arg + "'";
      return a;
    }
    std::string name = arg.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flag_names.count(name) && !inline_value) {
      a.flags.insert(name);
    } else if (with_value.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) {
          a.error = "option --" + name + " needs a value";
          return a;
        }
        value = argv[++i];
      }
      a.values[name] = value;
    } else {
      a.error = "unknown option --" + name;
      return a;
    }
  }
  return a;
}

}  // namespace trainer::job
