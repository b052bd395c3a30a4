#include "common/version.h"

namespace trainer {

const char* version_string() { return "0.1.0"; }

}  // namespace trainer
