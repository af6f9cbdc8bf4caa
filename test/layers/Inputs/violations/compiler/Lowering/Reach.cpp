// A compiler source reaching into the runtime.
#include "runtime/core/backend.h"
