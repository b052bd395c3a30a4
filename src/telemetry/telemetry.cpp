#include "telemetry/telemetry.h"
