#include "engine/data/dataset.h"
