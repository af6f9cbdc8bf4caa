// Tests may include what they test with.
#include "runtime/backends/cpu/cpu_backend.h"
