#include "engine/text/tokenizer.h"
