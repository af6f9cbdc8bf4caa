// The contract depending on the runtime.
#include "runtime/comm/communicator.h"
