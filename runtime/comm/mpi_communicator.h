// The MPI communicator's factory (mpi_communicator.cc). Only communicator.cc
// includes this, so that nothing else in the runtime sees <mpi.h>. Private to
// runtime/comm.

#ifndef GRAPHC_RUNTIME_COMM_MPI_COMMUNICATOR_H_
#define GRAPHC_RUNTIME_COMM_MPI_COMMUNICATOR_H_

#include <memory>

#include "runtime/comm/communicator.h"
#include "contract/status.h"

namespace graphc::runtime::comm {

// Starts the communication thread, which initializes MPI; returns once it has
// (kBackend when MPI fails to, kUnavailable when this process already did).
StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const CommOptions& options);

}  // namespace graphc::runtime::comm

#endif  // GRAPHC_RUNTIME_COMM_MPI_COMMUNICATOR_H_
