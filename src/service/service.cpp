#include "service/service.h"
