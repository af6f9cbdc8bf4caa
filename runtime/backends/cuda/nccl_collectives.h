// The CUDA backend's device collectives: gradient buckets allreduced by NCCL
// where they lie in device memory, on a communication stream of their own
// that waits for the compute stream through an event and that the compute
// stream waits for at the bucket's wait, so the transfer overlaps the rest
// of backward and the host never waits for the device.
//
// The NCCL communicator is bootstrapped over the job's Communicator (rank 0's
// ncclUniqueId is broadcast) and created non-blocking, so that a rank that
// never joins costs the timeout, not a hang. Each bucket is also announced
// on the Communicator (StartArrival), which checks that every rank reduces
// the same bucket and names the ranks that never reach it; a watchdog thread
// ends the process with one line when a transfer that every rank started
// does not finish within the timeout, or when NCCL reports an error, after
// aborting the NCCL communicator (which frees the stuck device kernels).
//
// Reductions and rounding match the host communicator's (communicator.h):
// F32 tensors are summed, then scaled by 1/size() for a mean; F16 and BF16
// values are scaled by 1/size() and rounded before the sum, and NCCL adds
// them in float and rounds each addition; an F32 tensor on an F16 or BF16
// wire is converted (scaled first, for a mean) into a staging buffer on the
// device, reduced there and widened back. Integers are summed; I1 tensors
// (bytes 0 or 1) take the maximum byte, their logical or. Only the order of
// the additions differs from MPI's, as it differs between MPI's algorithms.

#ifndef GRAPHC_RUNTIME_BACKENDS_CUDA_NCCL_COLLECTIVES_H_
#define GRAPHC_RUNTIME_BACKENDS_CUDA_NCCL_COLLECTIVES_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "runtime/core/backend.h"
#include "contract/status.h"

namespace graphc::runtime {

// Device collectives for CUDA device `device`, ordered with `compute` (the
// backend's compute stream, which must outlive them); not yet joined.
StatusOr<std::unique_ptr<DeviceCollectives>> NewNcclCollectives(int device, cudaStream_t compute,
                                                                const CommOptions& options);

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_BACKENDS_CUDA_NCCL_COLLECTIVES_H_
