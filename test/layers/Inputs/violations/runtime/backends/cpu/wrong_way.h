// A backend including its factory.
#include "runtime/core/backend.h"
#include "runtime/backends/backend_factory.h"
