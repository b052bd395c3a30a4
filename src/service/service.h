// The trainer service: run lifecycle, pools and claims, catalog. No HTTP here.
#pragma once

namespace trainer::service {}
