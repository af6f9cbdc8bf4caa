// Moves each batch into the train program's input buffers. On an
// asynchronous device, per step s:
//   1) the prefetch thread has the batch on the host; it is copied into
//      pinned slot s % 2 (after the copy that last used the slot finished),
//      and from there to a device staging slot on the copy stream;
//   2) the compute stream waits for that copy, moves the batch from staging
//      into the program's input buffers (which live in the arena, so they can
//      only be written once the previous step is done with them: the compute
//      stream's order guarantees it), and runs the step.
// The host never waits for the device here except for a slot two steps old.
// On a synchronous device (the CPU) the batch is written straight into the
// input buffers: the staging would only add copies.

#ifndef GRAPHC_RUNTIME_TRAIN_INPUT_FEEDER_H_
#define GRAPHC_RUNTIME_TRAIN_INPUT_FEEDER_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "contract/status.h"
#include "runtime/core/backend.h"
#include "runtime/core/executor.h"
#include "runtime/train/dataset.h"

namespace graphc::runtime {

class InputFeeder {
 public:
  InputFeeder(Backend& backend, Executor& exec, int32_t images, int32_t labels)
      : backend_(backend), exec_(exec), buffers_{images, labels} {}
  ~InputFeeder() {
    if (!staged_) return;
    backend_.Synchronize();  // nothing may still read what is freed
    for (Slot& slot : slots_) {
      for (int i = 0; i < 2; ++i) {
        backend_.FreeHost(slot.host[i]);
        backend_.Free(slot.device[i]);
      }
      for (Event e : {slot.copied, slot.consumed}) backend_.DestroyEvent(e);
    }
  }

  Status Initialize() {
    if (!backend_.asynchronous()) return Status::Ok();
    staged_ = true;
    for (Slot& slot : slots_) {
      for (int i = 0; i < 2; ++i) {
        const uint64_t bytes = exec_.buffer(buffers_[i]).size();
        StatusOr<HostMemory> host = backend_.AllocateHost(bytes);
        if (!host.ok()) return host.status();
        slot.host[i] = *host;
        StatusOr<DeviceMemory> device = backend_.Allocate(bytes);
        if (!device.ok()) return device.status();
        slot.device[i] = *device;
      }
      for (Event* e : {&slot.copied, &slot.consumed}) {
        StatusOr<Event> event = backend_.CreateEvent(/*timed=*/false);
        if (!event.ok()) return event.status();
        *e = *event;
      }
    }
    return Status::Ok();
  }

  // Enqueues the copies that put `batch` into the input buffers, ordered
  // before whatever the compute stream runs next.
  Status Feed(const Batch& batch) {
    const void* data[2] = {ImageData(batch), batch.labels.data()};
    const uint64_t bytes[2] = {ImageBytes(batch), batch.labels.size() * sizeof(int32_t)};
    if (!staged_) {
      for (int i = 0; i < 2; ++i) {
        Status status = exec_.Write(buffers_[i], data[i], bytes[i]);
        if (!status.ok()) return status;
      }
      return Status::Ok();
    }
    Slot& slot = slots_[next_];
    next_ = 1 - next_;
    // The copy two steps ago that read this pinned slot, and the step that
    // read its staging buffer, are done once `consumed` is.
    if (slot.used) {
      Status status = backend_.SynchronizeEvent(slot.consumed);
      if (!status.ok()) return status;
    }
    slot.used = true;
    for (int i = 0; i < 2; ++i) {
      if (bytes[i] != slot.host[i].bytes)
        return Status(ErrorCode::kInvalidArgument,
                      "buffer '" + PrintableOf(exec_.buffer(buffers_[i]).name()) + "' holds " +
                          std::to_string(slot.host[i].bytes) + " bytes, not " +
                          std::to_string(bytes[i]));
      std::memcpy(slot.host[i].address, data[i], bytes[i]);
    }
    Status status;
    for (int i = 0; i < 2 && status.ok(); ++i)
      status = backend_.CopyToDeviceAsync(slot.device[i], slot.host[i], bytes[i], Stream::kCopy);
    if (status.ok()) status = backend_.RecordEvent(slot.copied, Stream::kCopy);
    if (status.ok()) status = backend_.WaitEvent(Stream::kCompute, slot.copied);
    for (int i = 0; i < 2 && status.ok(); ++i)
      status = backend_.CopyOnDevice(exec_.MemoryOf(buffers_[i]), slot.device[i], bytes[i],
                                     Stream::kCompute);
    if (status.ok()) status = backend_.RecordEvent(slot.consumed, Stream::kCompute);
    return status;
  }

 private:
  struct Slot {
    HostMemory host[2];      // images, labels (pinned)
    DeviceMemory device[2];  // their staging copies
    Event copied, consumed;
    bool used = false;
  };
  Backend& backend_;
  Executor& exec_;
  int32_t buffers_[2];
  bool staged_ = false;
  Slot slots_[2];
  int next_ = 0;
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_INPUT_FEEDER_H_
