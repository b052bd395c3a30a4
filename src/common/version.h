// Build identity reported by every executable (`--version`) and by the service's `info`.
#pragma once

namespace trainer {

const char* version_string();  // e.g. "0.1.0"

}  // namespace trainer
