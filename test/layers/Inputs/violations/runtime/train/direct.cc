// The trainer reaching a backend past the factory.
#include "runtime/backends/backend_factory.h"
#include "runtime/backends/cuda/cuda_backend.h"
